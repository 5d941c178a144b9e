//! The file names of tracked files, packed in one arena.
//!
//! A node with a million finished workers has a million names like
//! `worker-<56 hex>-01000000-12345.out`: as a `Box<str>` each costs 82 bytes plus the
//! allocator's 16 and a 16-byte pointer. Here a name is a [`Name`] (a 4-byte offset)
//! into one byte vector, with runs of lowercase hex digits stored two to a byte, so
//! the same name takes 41 bytes (40 and its length) and no allocation of its own.
//!
//! Encoding of one name: its encoded length (LEB128), then
//! - a byte below 0x80: that ASCII character;
//! - `0x80 | n` (4 ≤ n ≤ 61): a run of `n` characters of `0-9a-f`, packed high
//!   nibble first, `⌈n/2⌉` bytes; `0xC0 | n`: the same run after a `-` (a worker's
//!   job id and pid each follow one: 2 bytes less a worker);
//! - `0x80..=0x83` and `0xFE`: one of the [`TOKENS`], the words every worker's files
//!   are named with (`python-core-worker-`, `worker-`, `.out`, `.err`, `.log`): 9 to
//!   21 bytes less a worker;
//! - `0xC2`, `0xC3`: `worker-` or `python-core-worker-` then a run of 56 (a worker
//!   id), packed in the 28 bytes that follow (the token and the run's marker in one);
//! - `0xBE i`, `0xBF i` (after a `-`): a run of 8, the `i`th of the arena's
//!   dictionary of such runs (the first 256 seen). A worker's job id is one, and the
//!   few jobs of a node share it (3 bytes less a worker); `0x01..=0x1F` alone: after
//!   a `-`, one of the dictionary's first 31 (4 bytes less: a node runs few jobs);
//! - `0xC0 v`, `0xC1 v`: `-` or `_` then the decimal number `v` (3 bytes, little
//!   endian) of 5 to 7 digits, the first not `0`: a pid (a 7-digit pid is 1 byte
//!   less than as a hex run, and after a `_`, as in a core worker's log, 2);
//! - `0xFF b`: the byte `b` (non-ASCII UTF-8, and the control characters that the
//!   dictionary's one-byte codes use, which no tool names files with anyway).
//!
//! A freed name leaves garbage; [`Names::compact`] rewrites the arena once garbage
//! is most of it, and the table renumbers its entries.

/// A name's place in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Name(u32);

impl Name {
    /// No name (a vacant slot's).
    pub const NONE: Name = Name(u32::MAX);
}

/// Runs shorter than this stay literal (a marker byte would save nothing).
const MIN_RUN: usize = 4;
/// The longest run one marker holds (longer runs take several).
const MAX_RUN: usize = 61;
/// Set in a run's marker when a `-` came before it.
const DASH: u8 = 0x40;
const ESCAPE: u8 = 0xFF;
/// A run of 8 from the dictionary, plain and after a `-`.
const SHORT: u8 = 0xBE;
const SHORT_DASH: u8 = 0xBF;
/// The length of the runs the dictionary holds (a job id's).
const SHORT_RUN: usize = 8;

/// A pid after a `-` and after a `_` (the run codes of fewer than [`MIN_RUN`]).
const PID_DASH: u8 = 0xC0;
const PID_UNDERSCORE: u8 = 0xC1;
/// A worker's id after its token, and the length of the run it takes.
const WORKER_IDS: [(u8, u8); 2] = [(0xC2, 0x81), (0xC3, 0x80)];
const WORKER_ID_RUN: usize = 56;
/// After a `-`, the dictionary's entry `c - 1` in one byte `c`.
const SHORT_BYTES: std::ops::RangeInclusive<u8> = 0x01..=0x1F;
/// The digits a pid code holds (fewer are as short as a hex run, 8 would take a job
/// id's place, and no system numbers pids past 7).
const PID_DIGITS: std::ops::RangeInclusive<usize> = 5..=7;

/// Whether `c` is the marker of a run that a `-` came before.
fn dash_run(c: u8) -> bool {
    c == SHORT_DASH
        || SHORT_BYTES.contains(&c)
        || c == PID_DASH
        || (0xC0 | MIN_RUN as u8..=0xC0 | MAX_RUN as u8).contains(&c)
}

/// A pid code for `b`'s start (`-` or `_`, then 5 to 7 digits, the first not `0`,
/// ending the hex run): the marker, the value and the bytes taken.
fn pid(b: &[u8]) -> Option<(u8, u32, usize)> {
    let marker = match b.first()? {
        b'-' => PID_DASH,
        b'_' => PID_UNDERSCORE,
        _ => return None,
    };
    let digits = b[1..].iter().take(8).take_while(|c| c.is_ascii_digit()).count();
    if !PID_DIGITS.contains(&digits) || b[1] == b'0' || hex_run(&b[1..]) != digits {
        return None;
    }
    let v = b[1..=digits].iter().fold(0u32, |v, &c| v * 10 + (c - b'0') as u32);
    Some((marker, v, 1 + digits))
}

/// Words stored as one byte (the codes no run uses), longest first: at a place
/// where several match, the first wins. None starts with a hex digit, so a run
/// never takes the start of one.
const TOKENS: [(u8, &[u8]); 5] =
    [(0x80, b"python-core-worker-"), (0x81, b"worker-"), (0x82, b".out"), (0x83, b".err"), (0xFE, b".log")];

fn token(code: u8) -> Option<&'static [u8]> {
    TOKENS.iter().find(|(c, _)| *c == code).map(|(_, t)| *t)
}

/// The word a code stands for, alone or with a worker id after it.
fn word(code: u8) -> Option<&'static [u8]> {
    token(WORKER_IDS.iter().find(|(c, _)| *c == code).map_or(code, |(_, t)| *t))
}

#[derive(Default)]
pub struct Names {
    bytes: Vec<u8>,
    garbage: usize,
    /// The runs of 8 coded in one byte (packed), in the order first seen, and
    /// their codes. Never shrinks: names encoded with a code keep it, and one
    /// encoded without (the dictionary was full) never gets one.
    shorts: Vec<[u8; 4]>,
    short_codes: std::collections::HashMap<[u8; 4], u8>,
}

impl Names {
    /// `rel` encoded, as [`Names::raw`] gives it for a name stored as `rel`.
    pub fn encoded(&self, rel: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(rel.len());
        encode(rel, &mut out, &mut |run| self.short_codes.get(&run).copied());
        out
    }

    /// Stores `rel`.
    pub fn add(&mut self, rel: &str) -> Name {
        let at = self.bytes.len();
        let mut enc = Vec::with_capacity(rel.len());
        let (shorts, codes) = (&mut self.shorts, &mut self.short_codes);
        encode(rel, &mut enc, &mut |run| {
            if let Some(&c) = codes.get(&run) {
                return Some(c);
            }
            let c = u8::try_from(shorts.len()).ok()?;
            shorts.push(run);
            codes.insert(run, c);
            Some(c)
        });
        push_len(&mut self.bytes, enc.len());
        self.bytes.extend_from_slice(&enc);
        // An arena past 4 GiB would need 40 million names of 100 bytes.
        Name(u32::try_from(at).expect("name arena over 4 GiB"))
    }

    /// The encoded bytes of `n` (what hashing and comparing use).
    pub fn raw(&self, n: Name) -> &[u8] {
        let (len, skip) = read_len(&self.bytes[n.0 as usize..]);
        let start = n.0 as usize + skip;
        &self.bytes[start..start + len]
    }

    /// The name `n` stands for.
    pub fn get(&self, n: Name) -> String {
        decode(self.raw(n), &self.shorts)
    }

    /// Whether name `n` may contain `needle`, made of characters other than hex
    /// digits and of isolated ones (`-core-`), which are stored as they are (but for
    /// a last `-`, which a run after it takes in): false means it does not, true is
    /// to be checked on the name (packed bytes may look like it).
    pub fn has(&self, n: Name, needle: &[u8]) -> bool {
        let raw = self.raw(n);
        let found = match needle.split_last() {
            Some((b'-', head)) if !head.is_empty() => memchr::memmem::find_iter(raw, head)
                .any(|at| raw.get(at + head.len()).is_some_and(|&c| c == b'-' || dash_run(c))),
            _ => memchr::memmem::find(raw, needle).is_some(),
        };
        found || raw.iter().any(|&c| c >= 0x80 && word(c).is_some_and(|t| memchr::memmem::find(t, needle).is_some()))
    }

    /// The token name `n` starts with, if any (`worker-` for a worker's output).
    pub fn leading_token(&self, n: Name) -> Option<&'static [u8]> {
        word(*self.raw(n).first()?)
    }

    /// Whether `a` and `b` are the same name.
    pub fn same(&self, a: Name, b: Name) -> bool {
        a == b || self.raw(a) == self.raw(b)
    }

    /// Marks `n` unused.
    pub fn free(&mut self, n: Name) {
        let (len, skip) = read_len(&self.bytes[n.0 as usize..]);
        self.garbage += len + skip;
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Whether a [`Names::compact`] would pay: garbage over half the arena, and at
    /// least 1 MiB of it.
    pub fn wants_compact(&self) -> bool {
        self.garbage >= 1 << 20 && self.garbage * 2 > self.bytes.len()
    }

    /// Copies the names still in use (`live`, each once) to a new arena and returns
    /// their new places, in the same order. Every `Name` not in `live` is invalid
    /// afterwards.
    pub fn compact(&mut self, live: impl Iterator<Item = Name>) -> Vec<Name> {
        let mut bytes = Vec::with_capacity(self.bytes.len() - self.garbage);
        let moved = live
            .map(|n| {
                let (len, skip) = read_len(&self.bytes[n.0 as usize..]);
                let at = bytes.len() as u32;
                bytes.extend_from_slice(&self.bytes[n.0 as usize..n.0 as usize + skip + len]);
                Name(at)
            })
            .collect();
        self.bytes = bytes;
        self.garbage = 0;
        moved
    }
}

/// Encodes `rel` into `out` (see the module docs); `short` gives the dictionary's
/// code of a run of 8 (packed), if it has one.
fn encode(rel: &str, out: &mut Vec<u8>, short: &mut dyn FnMut([u8; 4]) -> Option<u8>) {
    let b = rel.as_bytes();
    let mut i = 0;
    while i < b.len() {
        // Every token starts with one of these (a million names pass here at a restart).
        let token = matches!(b[i], b'p' | b'w' | b'.').then(|| TOKENS.iter().find(|(_, t)| b[i..].starts_with(t)));
        if let Some((code, t)) = token.flatten() {
            i += t.len();
            match WORKER_IDS.iter().find(|(_, tc)| tc == code) {
                Some((id, _)) if hex_run(&b[i..]) == WORKER_ID_RUN => {
                    out.push(*id);
                    out.extend(packed(&b[i..i + WORKER_ID_RUN]));
                    i += WORKER_ID_RUN;
                }
                _ => out.push(*code),
            }
            continue;
        }
        if let Some((marker, v, taken)) = pid(&b[i..]) {
            out.push(marker);
            out.extend_from_slice(&v.to_le_bytes()[..3]);
            i += taken;
            continue;
        }
        let dash = b[i] == b'-' && hex_run(&b[i + 1..]) >= MIN_RUN;
        let from = i + dash as usize;
        let run = hex_run(&b[from..]);
        let code = (run == SHORT_RUN).then(|| {
            let mut key = [0; SHORT_RUN / 2];
            key.iter_mut().zip(packed(&b[from..from + run])).for_each(|(k, v)| *k = v);
            short(key)
        });
        if let Some(Some(code)) = code {
            match code.checked_add(*SHORT_BYTES.start()) {
                Some(c) if dash && SHORT_BYTES.contains(&c) => out.push(c),
                _ => out.extend_from_slice(&[if dash { SHORT_DASH } else { SHORT }, code]),
            }
            i = from + run;
        } else if run >= MIN_RUN {
            out.push(0x80 | if dash { DASH } else { 0 } | run as u8);
            out.extend(packed(&b[from..from + run]));
            i = from + run;
        } else if b[i] < 0x80 && !SHORT_BYTES.contains(&b[i]) {
            out.push(b[i]);
            i += 1;
        } else {
            out.extend_from_slice(&[ESCAPE, b[i]]);
            i += 1;
        }
    }
}

/// Hex digits two to a byte, high nibble first.
fn packed(hex: &[u8]) -> impl Iterator<Item = u8> + '_ {
    hex.chunks(2).map(|pair| nibble(pair[0]) << 4 | pair.get(1).map_or(0, |&c| nibble(c)))
}

fn unpack(packed: &[u8], n: usize, out: &mut Vec<u8>) {
    for k in 0..n {
        let v = packed[k / 2] >> (4 * (1 - k % 2)) & 0xF;
        out.push(b"0123456789abcdef"[v as usize]);
    }
}

fn decode(enc: &[u8], shorts: &[[u8; 4]]) -> String {
    let mut out = Vec::with_capacity(enc.len() * 2);
    let mut i = 0;
    while i < enc.len() {
        match enc[i] {
            ESCAPE => {
                out.push(enc[i + 1]);
                i += 2;
            }
            c @ (PID_DASH | PID_UNDERSCORE) => {
                let v = u32::from_le_bytes([enc[i + 1], enc[i + 2], enc[i + 3], 0]);
                out.push(if c == PID_DASH { b'-' } else { b'_' });
                // Into the buffer, not through a String (a write to a Vec cannot fail).
                let _ = std::io::Write::write_fmt(&mut out, format_args!("{v}"));
                i += 4;
            }
            c @ (SHORT | SHORT_DASH) => {
                if c == SHORT_DASH {
                    out.push(b'-');
                }
                unpack(&shorts[enc[i + 1] as usize], SHORT_RUN, &mut out);
                i += 2;
            }
            c if SHORT_BYTES.contains(&c) => {
                out.push(b'-');
                unpack(&shorts[(c - SHORT_BYTES.start()) as usize], SHORT_RUN, &mut out);
                i += 1;
            }
            c if token(c).is_some() => {
                out.extend_from_slice(token(c).unwrap_or_default());
                i += 1;
            }
            c if word(c).is_some() => {
                out.extend_from_slice(word(c).unwrap_or_default());
                unpack(&enc[i + 1..i + 1 + WORKER_ID_RUN / 2], WORKER_ID_RUN, &mut out);
                i += 1 + WORKER_ID_RUN / 2;
            }
            c if c >= 0x80 => {
                if c & DASH != 0 {
                    out.push(b'-');
                }
                let n = (c & !(0x80 | DASH)) as usize;
                unpack(&enc[i + 1..i + 1 + n.div_ceil(2)], n, &mut out);
                i += 1 + n.div_ceil(2);
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    // Only whole UTF-8 sequences were encoded, so this never replaces anything.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// How many of `b`'s first characters are `0-9a-f` (at most [`MAX_RUN`]).
fn hex_run(b: &[u8]) -> usize {
    b.iter().take(MAX_RUN).take_while(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')).count()
}

fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        _ => c - b'a' + 10,
    }
}

fn push_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(0x80 | (n & 0x7F) as u8);
        n >>= 7;
    }
    out.push(n as u8);
}

fn read_len(b: &[u8]) -> (usize, usize) {
    let (mut n, mut shift, mut i) = (0usize, 0, 0);
    loop {
        let c = b[i];
        n |= ((c & 0x7F) as usize) << shift;
        i += 1;
        if c < 0x80 {
            return (n, i);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_pack_hex() {
        let worker = format!("worker-{:056x}-01000000-12345.out", 0xA000123u64);
        let mut names = Names::default();
        let cases = [
            worker.as_str(),
            "raylet.out",
            "events/event_GCS.log",
            "python-core-worker-0123456789abcdef0123_4567.log",
            "abc",
            "",
            "deadbeef",
            "日本語-ファイル.log",
            "ABCDEF0123",
            &"f".repeat(300),
            "worker-worker-.out.err.log.outx",
            "python-core-worker-",
            "xpython-core-worke",
            ".lo",
            "0123worker-abcd.err.1",
            "a-bcde",
            "-abcd",
            "x--abcd-",
            "worker-abc-defa0-",
            &format!("-{}", "f".repeat(300)),
            "foo-core-abcd1234.log",
            "-",
            "--0123",
            "worker-ab-1234567.out",
            "x_9999999.log_1000000-10000-0123456-12345678-123456a-99999",
            "-1234567",
            "_12345",
            "a\u{1}b-\u{1f}\u{7f}\u{20}",
            &format!("worker-{}", "a".repeat(56)),
            &format!("worker-{}", "a".repeat(57)),
            &format!("python-core-worker-{}-", "0".repeat(56)),
            &format!("xworker-{}.err", "9".repeat(56)),
        ];
        let ids: Vec<Name> = cases.iter().map(|c| names.add(c)).collect();
        for (c, id) in cases.iter().zip(&ids) {
            assert_eq!(names.get(*id), *c);
        }
        assert_eq!(names.raw(ids[0]).len(), 35, "a worker name packs its ids, dashes and words");
        assert_eq!(
            names.raw(ids[27]),
            [b'a', ESCAPE, 1, b'b', b'-', ESCAPE, 0x1F, 0x7F, b' '],
            "control bytes escaped"
        );
        assert_eq!(names.raw(ids[28]).len(), 29, "worker- and its id: one byte and the packed id");
        assert_eq!(names.raw(ids[29]).len(), 31, "a longer run is the token and a run");
        for (c, id) in cases.iter().zip(&ids) {
            assert_eq!(names.encoded(c), names.raw(*id), "{c} looked up as stored");
        }
        assert_eq!(names.raw(ids[3]).len(), 17, "python-core-worker- is one byte");
        let big_pid = names.add(&worker.replace("12345", "1234567"));
        assert_eq!(names.raw(big_pid).len(), 35, "a 7-digit pid takes no more than a 5-digit one");
        let core_log = names.add(&format!("python-core-worker-{:056x}_1234567.log", 0xA000123u64));
        assert_eq!(names.raw(core_log).len(), 1 + 28 + 4 + 1, "token and id, pid, token");
        assert!(names.has(ids[3], b"-core-") && !names.has(ids[0], b"-core-"));
        assert!(names.has(ids[1], b".out") && names.has(ids[3], b"worker"));
        assert!(names.has(ids[0], b"worker-") && names.has(core_log, b"-core-worker"));
        assert_eq!(names.leading_token(ids[0]), Some(&b"worker-"[..]));
        assert_eq!(names.leading_token(core_log), Some(&b"python-core-worker-"[..]));
        assert_eq!(names.leading_token(ids[31]), None);
        // A `-` that a run took in is still found at the end of a needle.
        let core = names.add("foo-core-abcd1234.log");
        assert!(names.has(core, b"-core-") && names.has(core, b"core-") && !names.has(core, b"-cores-"));
        let pid_core = names.add("foo-core-12345.log");
        assert!(names.has(pid_core, b"-core-") && !names.has(pid_core, b"-cores-"));
        assert!(!names.has(ids[1], b"raylet-"));
        let again = names.add("raylet.out");
        assert!(names.same(ids[1], again));
        assert!(!names.same(ids[1], ids[2]));
    }

    /// The first 256 job ids get a code; later ones are stored whole, and every
    /// name is found by what it was stored as.
    #[test]
    fn a_full_dictionary_leaves_later_runs_whole() {
        let mut names = Names::default();
        let name = |job: u32| format!("worker-{:056x}-{job:08x}-{}.out", 0xA000000 + job, 1000 + job);
        let ids: Vec<Name> = (0..300).map(|j| names.add(&name(j))).collect();
        for (j, id) in ids.iter().enumerate() {
            assert_eq!(names.get(*id), name(j as u32));
            assert_eq!(names.encoded(&name(j as u32)), names.raw(*id));
            let raw = names.raw(*id);
            // After the worker id's code and 28 bytes: the job id's code, or a run's marker.
            let coded = raw[29] == SHORT_DASH || SHORT_BYTES.contains(&raw[29]);
            assert_eq!(coded, j < 256, "job {j}");
            assert_eq!(
                raw.len(),
                if j < 31 {
                    34
                } else if j < 256 {
                    35
                } else {
                    38
                },
                "job {j}"
            );
        }
        assert!(!names.encoded("x-ffffffff-y").contains(&SHORT_DASH), "not in the full dictionary");
        let mut fresh = Names::default();
        let before = fresh.encoded("a-01000000-b");
        assert!(!before.contains(&SHORT_DASH) && fresh.shorts.is_empty(), "a lookup adds nothing");
        let id = fresh.add("a-01000000-b");
        assert_eq!((fresh.raw(id).len(), fresh.encoded("a-01000000-b").as_slice()), (4, fresh.raw(id)));
    }

    proptest::proptest! {
        /// Names glued from the pieces the codes are made for (ids, pids, tokens, control
        /// bytes) come back as they went in, and are found by what they were stored as.
        #[test]
        fn any_name_of_the_coded_pieces_round_trips(pieces in proptest::collection::vec(0usize..12, 0..12), seed: u64) {
            let parts = ["worker-", "python-core-worker-", ".out", ".log", "-", "_", "\u{1}", "\u{1f}", "é"];
            let mut names = Names::default();
            let mut ids = Vec::new();
            for k in 0..40u64 {
                let mut name = String::new();
                for (j, &p) in pieces.iter().enumerate() {
                    let v = seed.wrapping_mul(k + 1).rotate_left(j as u32 * 7);
                    match p {
                        9 => name.push_str(&format!("{:056x}", v as u128 * v as u128)),
                        10 => name.push_str(&format!("{:08x}", v % 40)),
                        11 => name.push_str(&format!("{}", v % 10_000_000)),
                        _ => name.push_str(parts[p]),
                    }
                }
                ids.push((names.add(&name), name));
            }
            for (id, name) in &ids {
                proptest::prop_assert_eq!(&names.get(*id), name);
                proptest::prop_assert_eq!(names.encoded(name), names.raw(*id));
            }
        }
    }

    #[test]
    fn every_token_starts_with_a_byte_the_encoder_looks_for() {
        assert!(TOKENS.iter().all(|(_, t)| matches!(t[0], b'p' | b'w' | b'.')));
    }

    #[test]
    fn compaction_keeps_the_live_names() {
        let mut names = Names::default();
        let ids: Vec<Name> = (0..60_000).map(|i| names.add(&format!("worker-{i:056x}.out"))).collect();
        for id in ids.iter().step_by(3).skip(1) {
            names.free(*id);
        }
        for id in ids.iter().skip(2).step_by(3) {
            names.free(*id);
        }
        assert!(names.wants_compact());
        let live: Vec<(usize, Name)> = ids.iter().copied().enumerate().step_by(3).collect();
        let moved = names.compact(live.iter().map(|(_, n)| *n));
        for ((i, _), n) in live.iter().zip(moved) {
            assert_eq!(names.get(n), format!("worker-{i:056x}.out"));
        }
        assert!(!names.wants_compact());
    }
}
