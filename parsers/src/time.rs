//! Timestamps: parsing Ray's naive local times and printing RFC 3339 UTC.
//!
//! Ray writes wall-clock times without a zone (`2026-11-30 09:05:33,150`), so the
//! reader must say which zone they are in ([`Zone`], `--timezone`, default UTC).
//! Everything is kept as nanoseconds since the Unix epoch in UTC. The UTC path is
//! pure integer arithmetic (no allocation, no tz database) because it runs once per
//! record; other zones go through `jiff` and its system tz database.

use std::fmt;

/// Nanoseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

/// The zone naive timestamps are read in.
#[derive(Clone, Debug, Default)]
pub enum Zone {
    /// Naive times are UTC (Ray in containers, the common case).
    #[default]
    Utc,
    /// A named IANA zone or fixed offset, resolved with jiff.
    Tz(jiff::tz::TimeZone),
}

/// Error for an unknown `--timezone` value.
#[derive(Debug, thiserror::Error)]
#[error("unknown time zone {name:?}: use an IANA name such as `Europe/Paris`, `UTC`, or an offset such as `+02:00` ({reason})")]
pub struct ZoneError {
    name: String,
    reason: String,
}

impl Zone {
    /// Parses `UTC`, an IANA name, or a fixed offset like `+05:30`.
    pub fn parse(name: &str) -> Result<Zone, ZoneError> {
        let err = |reason: String| ZoneError { name: name.to_string(), reason };
        if name.eq_ignore_ascii_case("utc") || name == "Z" {
            return Ok(Zone::Utc);
        }
        if name.starts_with(['+', '-']) {
            let off = parse_offset(name).ok_or_else(|| err("bad offset".into()))?;
            return Ok(Zone::Tz(jiff::tz::TimeZone::fixed(off)));
        }
        jiff::tz::TimeZone::get(name).map(Zone::Tz).map_err(|e| err(e.to_string()))
    }

    /// Converts a naive civil time to UTC nanoseconds; `None` when the instant is
    /// outside what a [`Timestamp`] holds (1677–2262) or does not exist in the zone.
    pub fn to_utc(&self, c: Civil) -> Option<Timestamp> {
        match self {
            Zone::Utc => c.as_utc(),
            Zone::Tz(tz) => {
                let dt = jiff::civil::DateTime::new(
                    c.year as i16,
                    c.month as i8,
                    c.day as i8,
                    c.hour as i8,
                    c.minute as i8,
                    c.second as i8,
                    c.nanos as i32,
                )
                .ok()?;
                let z = dt.to_zoned(tz.clone()).ok()?;
                Timestamp::from_nanos_i128(z.timestamp().as_nanosecond())
            }
        }
    }
}

fn parse_offset(s: &str) -> Option<jiff::tz::Offset> {
    let sign = if s.starts_with('-') { -1 } else { 1 };
    let rest = &s[1..];
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let secs = h.parse::<i32>().ok()? * 3600 + m.parse::<i32>().ok()? * 60;
    jiff::tz::Offset::from_seconds(sign * secs).ok()
}

/// A naive calendar time as written in a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

impl Civil {
    /// The instant as UTC, checked: years outside 1677–2262 overflow `i64`
    /// nanoseconds, and a wrapped product would be a wrong time, not a missing one.
    fn as_utc(&self) -> Option<Timestamp> {
        let days = cached_days(self.year, self.month, self.day);
        let secs = days * 86_400 + (self.hour * 3600 + self.minute * 60 + self.second) as i64;
        secs.checked_mul(NANOS_PER_SEC)?.checked_add(self.nanos as i64).map(Timestamp)
    }

    /// Nanoseconds since the epoch of this time read as UTC, exact for any civil time
    /// (`i128` cannot overflow here), so that a caller can apply a written offset
    /// before the range is checked ([`Timestamp::from_nanos_i128`]).
    pub fn utc_nanos(&self) -> i128 {
        let clock = self.hour as i64 * 3600 + self.minute as i64 * 60 + self.second as i64;
        let secs = days_from_civil(self.year, self.month, self.day) * 86_400 + clock;
        secs as i128 * NANOS_PER_SEC as i128 + self.nanos as i128
    }
}

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// The unit of a number of time units since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochUnit {
    Seconds,
    Millis,
    Nanos,
}

impl EpochUnit {
    fn nanos(self) -> i64 {
        match self {
            EpochUnit::Seconds => NANOS_PER_SEC,
            EpochUnit::Millis => 1_000_000,
            EpochUnit::Nanos => 1,
        }
    }
}

/// A number that reads as a time but falls outside what a [`Timestamp`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("time outside 1677-09-21..2262-04-11, which nanoseconds in an i64 cannot hold")]
pub struct OutOfRange;

#[inline]
fn digits(b: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + d as u32;
    }
    Some(v)
}

/// The two decimal digits at `h[i..i + 2]`: like [`digits`], but on a fixed-size
/// header, so without a loop or bounds checks (it runs for every record).
#[inline]
fn two_digits(h: &[u8; 19], i: usize) -> Option<u32> {
    let (hi, lo) = (h[i].wrapping_sub(b'0'), h[i + 1].wrapping_sub(b'0'));
    (hi <= 9 && lo <= 9).then_some(hi as u32 * 10 + lo as u32)
}

/// Parses `YYYY-MM-DD HH:MM:SS` optionally followed by `,fff` or `.ffffff`
/// (any 1–9 fraction digits) at the start of `b`. Returns the time and the number
/// of bytes consumed.
#[inline]
pub fn parse_civil(b: &[u8]) -> Option<(Civil, usize)> {
    let h = b.first_chunk::<19>()?;
    if h[4] != b'-' || h[7] != b'-' || h[13] != b':' || h[16] != b':' {
        return None;
    }
    if h[10] != b' ' && h[10] != b'T' {
        return None;
    }
    let c = Civil {
        year: (two_digits(h, 0)? * 100 + two_digits(h, 2)?) as i32,
        month: two_digits(h, 5)?,
        day: two_digits(h, 8)?,
        hour: two_digits(h, 11)?,
        minute: two_digits(h, 14)?,
        second: two_digits(h, 17)?,
        nanos: 0,
    };
    if !(1..=12).contains(&c.month) || !(1..=31).contains(&c.day) || c.hour > 23 || c.minute > 59 || c.second > 60 {
        return None;
    }
    let mut used = 19;
    let mut c = c;
    if b.len() > 20 && (b[19] == b',' || b[19] == b'.') && b[20].is_ascii_digit() {
        let frac = &b[20..];
        let n = frac.iter().take(9).take_while(|d| d.is_ascii_digit()).count();
        let v = digits(&frac[..n])?;
        c.nanos = v * 10u32.pow(9 - n as u32);
        used = 20 + n;
    }
    Some((c, used))
}

/// [`days_from_civil`], cached per thread: consecutive records share their date.
#[inline]
fn cached_days(y: i32, m: u32, d: u32) -> i64 {
    thread_local! {
        static LAST: std::cell::Cell<(i32, u32, u32, i64)> = const { std::cell::Cell::new((i32::MIN, 0, 0, 0)) };
    }
    LAST.with(|c| {
        let (ly, lm, ld, days) = c.get();
        if (ly, lm, ld) == (y, m, d) {
            return days;
        }
        let days = days_from_civil(y, m, d);
        c.set((y, m, d, days));
        days
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y } as i64;
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of the proleptic Gregorian date `day` days after 1970-01-01
/// (negative before it), by Howard Hinnant's algorithm: the inverse of the day
/// count naive times are read with, shared with the Elasticsearch sink's daily
/// index names so both agree on what day a time falls on.
pub fn civil_from_days(day: i64) -> (i64, u32, u32) {
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

impl Timestamp {
    /// From whole seconds since the epoch, saturating at the ends of the range (for
    /// times that are known to be sane, such as file mtimes; log content goes through
    /// [`Timestamp::parse_epoch`]).
    pub fn from_secs(s: i64) -> Timestamp {
        Timestamp(s.saturating_mul(NANOS_PER_SEC))
    }

    /// From nanoseconds as `i128` (jiff's unit), `None` outside the `i64` range.
    pub fn from_nanos_i128(ns: i128) -> Option<Timestamp> {
        i64::try_from(ns).ok().map(Timestamp)
    }

    /// Reads a JSON number (or its text in a string: the quotes are the caller's to
    /// strip) of `unit`s since the epoch: an integer, or a decimal such as events'
    /// float seconds. `None` when `s` is not a number, [`OutOfRange`] when it is one
    /// that no `Timestamp` can hold; never a wrapped or saturated time.
    pub fn parse_epoch(s: &str, unit: EpochUnit) -> Option<Result<Timestamp, OutOfRange>> {
        if let Some(exact) = parse_decimal(s, unit) {
            return Some(exact);
        }
        // Exponents (`1.7e9`) and other spellings Rust reads: in floating point.
        let f = s.parse::<f64>().ok().filter(|f| !f.is_nan())?;
        let ns = f * unit.nanos() as f64;
        // `as` would saturate silently; i64::MAX as f64 rounds up to 2^63, excluded.
        if ns >= -(2f64.powi(63)) && ns < 2f64.powi(63) {
            Some(Ok(Timestamp(ns as i64)))
        } else {
            Some(Err(OutOfRange))
        }
    }

    /// Writes RFC 3339 UTC into `out`: milliseconds when the sub-millisecond part
    /// is zero, else micro- or nanoseconds, so no precision is thrown away.
    #[inline]
    pub fn write_rfc3339(&self, out: &mut Vec<u8>) {
        let secs = self.0.div_euclid(1_000_000_000);
        let nanos = self.0.rem_euclid(1_000_000_000) as u32;
        let mut buf = *b"0000-00-00T00:00:00.000000000Z";
        buf[..19].copy_from_slice(&second_prefix(secs));
        let frac = if nanos % 1_000_000 == 0 {
            put(&mut buf[20..23], nanos / 1_000_000);
            3
        } else if nanos % 1000 == 0 {
            put(&mut buf[20..26], nanos / 1000);
            6
        } else {
            put(&mut buf[20..29], nanos);
            9
        };
        buf[20 + frac] = b'Z';
        // A fixed-size copy then a truncate is cheaper than a variable-length copy.
        out.extend_from_slice(&buf);
        out.truncate(out.len() - (9 - frac));
    }

    /// RFC 3339 UTC as a `String` (for display and tests).
    pub fn to_rfc3339(&self) -> String {
        let mut v = Vec::with_capacity(32);
        self.write_rfc3339(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }

    /// Parses an RFC 3339 / ISO 8601 time with or without zone (naive read in
    /// `zone`), e.g. for `--since`.
    pub fn parse_flexible(s: &str, zone: &Zone) -> Option<Timestamp> {
        if let Ok(ts) = s.parse::<jiff::Timestamp>() {
            return Timestamp::from_nanos_i128(ts.as_nanosecond());
        }
        let b = s.as_bytes();
        if b.len() == 10 {
            let mut full = s.as_bytes().to_vec();
            full.extend_from_slice(b" 00:00:00");
            return parse_civil(&full).and_then(|(c, _)| zone.to_utc(c));
        }
        match parse_civil(b) {
            Some((c, n)) if n == b.len() => zone.to_utc(c),
            _ => None,
        }
    }
}

/// `[-]digits[.digits]` of `unit`s as an exact instant (digits below a nanosecond
/// are dropped); `None` when `s` has another shape.
fn parse_decimal(s: &str, unit: EpochUnit) -> Option<Result<Timestamp, OutOfRange>> {
    let (neg, digits) = s.strip_prefix('-').map_or((false, s), |d| (true, d));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let unit = unit.nanos() as i128;
    // More than i128's 38 digits is out of range anyway.
    let whole = int.parse::<i128>().ok().and_then(|n| n.checked_mul(unit));
    let frac = &frac[..frac.len().min(18)];
    let part = frac.parse::<i128>().map_or(0, |f| f * unit / 10i128.pow(frac.len() as u32));
    let ns = whole.and_then(|w| w.checked_add(part)).map(|n| if neg { -n } else { n });
    Some(ns.and_then(Timestamp::from_nanos_i128).ok_or(OutOfRange))
}

/// `YYYY-MM-DDTHH:MM:SS` of a second since the epoch, cached per thread: records
/// of a file come many to a second, and formatting the digits is the costly part.
#[inline]
fn second_prefix(secs: i64) -> [u8; 19] {
    thread_local! {
        static LAST: std::cell::Cell<(i64, [u8; 19])> = const { std::cell::Cell::new((i64::MIN, [0; 19])) };
    }
    LAST.with(|c| {
        let (s, p) = c.get();
        if s == secs {
            return p;
        }
        let mut p = *b"0000-00-00T00:00:00";
        p[..10].copy_from_slice(&date_of_day(secs.div_euclid(86_400)));
        let sod = secs.rem_euclid(86_400) as u32;
        put(&mut p[11..13], sod / 3600);
        put(&mut p[14..16], sod / 60 % 60);
        put(&mut p[17..19], sod % 60);
        c.set((secs, p));
        p
    })
}

/// `YYYY-MM-DD` of a day number, cached per thread: consecutive records are almost
/// always on the same day, and the calendar arithmetic is the costly part.
fn date_of_day(day: i64) -> [u8; 10] {
    thread_local! {
        static LAST: std::cell::Cell<(i64, [u8; 10])> = const { std::cell::Cell::new((i64::MIN, [0; 10])) };
    }
    LAST.with(|c| {
        let (d, s) = c.get();
        if d == day {
            return s;
        }
        let (y, mo, dd) = civil_from_days(day);
        let mut s = *b"0000-00-00";
        put(&mut s[0..4], y.clamp(0, 9999) as u32);
        put(&mut s[5..7], mo);
        put(&mut s[8..10], dd);
        c.set((day, s));
        s
    })
}

#[inline]
fn put(dst: &mut [u8], mut v: u32) {
    for slot in dst.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_to_dates_and_back() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_453), (2025, 12, 31));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
        for day in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y as i32, m, d), day, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn parse_and_print() {
        let (c, n) = parse_civil(b"2026-11-30 09:05:33,150 I").unwrap();
        assert_eq!(n, 23);
        let ts = Zone::Utc.to_utc(c).unwrap();
        assert_eq!(ts.to_rfc3339(), "2026-11-30T09:05:33.150Z");
        let (c, _) = parse_civil(b"2020-02-29 23:59:59.123456").unwrap();
        assert_eq!(Zone::Utc.to_utc(c).unwrap().to_rfc3339(), "2020-02-29T23:59:59.123456Z");
        assert_eq!(Timestamp(1_796_029_536_393_944_816).to_rfc3339(), "2026-11-30T09:05:36.393944816Z");
        assert_eq!(Timestamp::from_secs(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn zones() {
        let (c, _) = parse_civil(b"2026-07-01 12:00:00,000").unwrap();
        let paris = Zone::parse("Europe/Paris").unwrap();
        assert_eq!(paris.to_utc(c).unwrap().to_rfc3339(), "2026-07-01T10:00:00.000Z");
        let plus = Zone::parse("+05:30").unwrap();
        assert_eq!(plus.to_utc(c).unwrap().to_rfc3339(), "2026-07-01T06:30:00.000Z");
        assert!(Zone::parse("Mars/Olympus").is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_civil(b"2026-13-30 09:05:33,150").is_none());
        assert!(parse_civil(b"hello world, this is not a date").is_none());
        assert!(parse_civil(b"2026-11-30").is_none());
        for bad in [&b"20x6-11-30 09:05:33"[..], b"2026-1/-30 09:05:33", b"2026-11-30 09:0:-33", b"2026-11-30 09:05:3 "]
        {
            assert!(parse_civil(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn civil_times_outside_i64_nanoseconds_are_none_not_wrapped() {
        let paris = Zone::parse("Europe/Paris").unwrap();
        for t in
            [&b"2300-01-01 00:00:00,000"[..], b"1600-01-01 00:00:00", b"9999-12-31 23:59:59", b"0000-01-01 00:00:00"]
        {
            let (c, _) = parse_civil(t).unwrap();
            assert_eq!(Zone::Utc.to_utc(c), None, "{}", String::from_utf8_lossy(t));
            assert_eq!(paris.to_utc(c), None, "{}", String::from_utf8_lossy(t));
        }
        // The last whole second each end still fits.
        let (c, _) = parse_civil(b"2262-04-11 23:47:16").unwrap();
        assert_eq!(Zone::Utc.to_utc(c).unwrap().to_rfc3339(), "2262-04-11T23:47:16.000Z");
        let (c, _) = parse_civil(b"1677-09-21 00:12:44").unwrap();
        assert_eq!(Zone::Utc.to_utc(c).unwrap().to_rfc3339(), "1677-09-21T00:12:44.000Z");
        let (c, _) = parse_civil(b"2262-04-11 23:47:17").unwrap();
        assert_eq!(Zone::Utc.to_utc(c), None);
        assert_eq!(Timestamp::parse_flexible("2300-01-01T00:00:00Z", &Zone::Utc), None);
        assert_eq!(Timestamp::parse_flexible("2300-01-01", &paris), None);
    }

    #[test]
    fn epoch_numbers_are_checked() {
        use EpochUnit::*;
        let ok = |s, u| Timestamp::parse_epoch(s, u).unwrap().unwrap();
        assert_eq!(ok("1796029537", Seconds).to_rfc3339(), "2026-11-30T09:05:37.000Z");
        assert_eq!(ok("1796029537.25", Seconds).to_rfc3339(), "2026-11-30T09:05:37.250Z");
        assert_eq!(ok("1796029537250", Millis).to_rfc3339(), "2026-11-30T09:05:37.250Z");
        assert_eq!(ok("-1", Nanos), Timestamp(-1));
        assert_eq!(ok("-1.5", Seconds), Timestamp(-1_500_000_000));
        assert_eq!(ok("0.0000000019", Seconds), Timestamp(1), "below a nanosecond is dropped");
        assert_eq!(ok("1.7e9", Seconds), Timestamp::from_secs(1_700_000_000));
        assert_eq!(ok("9223372036854775807", Nanos), Timestamp(i64::MAX));
        assert_eq!(ok("-9223372036854775808", Nanos), Timestamp(i64::MIN));
        for (s, u) in [
            ("9223372036854775808", Nanos),
            ("-9223372036854775809", Nanos),
            ("10413792000", Seconds),
            ("-11676096000", Seconds),
            ("10413792000000", Millis),
            ("1e300", Seconds),
            ("-1.5e10", Seconds),
            ("Infinity", Seconds),
            ("99999999999999999999999999999999999999999999", Nanos),
        ] {
            assert_eq!(Timestamp::parse_epoch(s, u), Some(Err(OutOfRange)), "{s}");
        }
        for s in ["", "-", "NaN", "soon", "12:00"] {
            assert_eq!(Timestamp::parse_epoch(s, Seconds), None, "{s:?}");
        }
    }

    #[test]
    fn flexible() {
        let z = Zone::Utc;
        assert_eq!(
            Timestamp::parse_flexible("2026-11-30T09:05:33Z", &z).unwrap().to_rfc3339(),
            "2026-11-30T09:05:33.000Z"
        );
        assert_eq!(Timestamp::parse_flexible("2026-11-30", &z).unwrap().to_rfc3339(), "2026-11-30T00:00:00.000Z");
        assert!(Timestamp::parse_flexible("yesterday", &z).is_none());
    }
}
