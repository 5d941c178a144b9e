//! Reading OTLP/HTTP answers: `ExportLogsServiceResponse` on success (its
//! `partial_success`), `google.rpc.Status` on failure, in protobuf or JSON (the
//! receiver answers in the request's encoding; the `Content-Type` says which).
//! Proxies answer with HTML or plain text: that is kept as the reason.

/// `ExportLogsPartialSuccess`: `rejected_log_records` (1), `error_message` (2).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Partial {
    pub rejected: i64,
    pub message: String,
}

/// The partial success of a 2xx body, if it has one. An empty body is a full
/// success; a body that does not decode as an `ExportLogsServiceResponse` is an
/// error, whatever part of it did: it may have been a partial success.
pub fn partial_success(body: &[u8], json: bool) -> Result<Option<Partial>, String> {
    // Whitespace holds no partial success in either encoding.
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if json || body.first() == Some(&b'{') {
        return partial_json(body);
    }
    let mut found = None;
    for_each_field(body, |field, v| {
        match (field, v) {
            (1, Wire::Len(inner)) => found = Some(partial_pb(inner)?),
            // A protobuf decoder refuses a known field of another wire type.
            (1, _) => return Err("partial_success is not a message".into()),
            _ => {}
        }
        Ok(())
    })?;
    Ok(found)
}

fn partial_pb(b: &[u8]) -> Result<Partial, String> {
    let mut p = Partial::default();
    for_each_field(b, |field, v| {
        match (field, v) {
            (1, Wire::Varint(n)) => p.rejected = n as i64,
            (2, Wire::Len(s)) => p.message = String::from_utf8_lossy(s).into_owned(),
            (1, _) => return Err("rejected_log_records is not a varint".into()),
            (2, _) => return Err("error_message is not a string".into()),
            _ => {}
        }
        Ok(())
    })?;
    Ok(p)
}

fn partial_json(body: &[u8]) -> Result<Option<Partial>, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let Some(obj) = v.as_object() else { return Err("not a JSON object".into()) };
    let ps = match obj.get("partialSuccess").or_else(|| obj.get("partial_success")) {
        // null is the field's default in proto3 JSON: not set.
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::Object(ps)) => ps,
        Some(other) => return Err(format!("partialSuccess {other} is not an object")),
    };
    let get = |a: &str, b: &str| ps.get(a).or_else(|| ps.get(b));
    // int64 is a string in proto3 JSON, but receivers write numbers too.
    let rejected = match get("rejectedLogRecords", "rejected_log_records") {
        None | Some(serde_json::Value::Null) => 0,
        Some(serde_json::Value::String(s)) => s.parse().map_err(|_| format!("rejectedLogRecords {s:?}"))?,
        Some(n) => n.as_i64().ok_or_else(|| format!("rejectedLogRecords {n}"))?,
    };
    let message = match get("errorMessage", "error_message") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(m)) => m.clone(),
        Some(other) => return Err(format!("errorMessage {other} is not a string")),
    };
    Ok(Some(Partial { rejected, message }))
}

/// The reason in an error answer: `google.rpc.Status.message` in JSON or protobuf
/// (whatever the request's encoding: Loki answers a JSON request in protobuf), else
/// the text.
pub fn error_message(body: &[u8]) -> String {
    let text = || String::from_utf8_lossy(&body[..body.len().min(500)]).trim().to_string();
    if body.first() == Some(&b'{') {
        let msg = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string));
        return msg.unwrap_or_else(text);
    }
    let mut msg = None;
    let parsed = for_each_field(body, |field, v| {
        if let (2, Wire::Len(s)) = (field, v) {
            msg = std::str::from_utf8(s).ok().map(str::to_string);
        }
        Ok(())
    });
    match (parsed, msg) {
        (Ok(()), Some(m)) if !m.is_empty() => m,
        _ => text(),
    }
}

/// A field's value as read off the wire.
enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

/// Calls `f` for each field of the protobuf message `b`.
fn for_each_field<'a>(mut b: &'a [u8], mut f: impl FnMut(u64, Wire<'a>) -> Result<(), String>) -> Result<(), String> {
    while !b.is_empty() {
        let tag = varint(&mut b)?;
        let v = match tag & 7 {
            0 => Wire::Varint(varint(&mut b)?),
            1 | 5 => {
                let n = if tag & 7 == 1 { 8 } else { 4 };
                b = b.get(n..).ok_or("a fixed field runs past the end")?;
                Wire::Fixed
            }
            2 => {
                let n = usize::try_from(varint(&mut b)?).map_err(|_| "a length too large")?;
                let (s, rest) = (b.get(..n).ok_or("a field runs past the end")?, &b[n..]);
                b = rest;
                Wire::Len(s)
            }
            w => return Err(format!("wire type {w} is not protobuf that OTLP answers with")),
        };
        if tag >> 3 == 0 {
            return Err("field number 0".into());
        }
        f(tag >> 3, v)?;
    }
    Ok(())
}

fn varint(b: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&byte, rest)) = b.split_first() else { return Err("a varint runs past the end".into()) };
        *b = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err("a varint longer than 10 bytes".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_successes_in_both_encodings() {
        assert_eq!(partial_success(b"", false), Ok(None));
        assert_eq!(partial_success(b"{}", true), Ok(None));
        // partial_success { rejected_log_records: 3, error_message: "too old" }
        let pb = [0x0a, 0x0b, 0x08, 0x03, 0x12, 0x07, b't', b'o', b'o', b' ', b'o', b'l', b'd'];
        assert_eq!(partial_success(&pb, false), Ok(Some(Partial { rejected: 3, message: "too old".into() })));
        let js = br#"{"partialSuccess":{"rejectedLogRecords":"2","errorMessage":"bad"}}"#;
        assert_eq!(partial_success(js, true), Ok(Some(Partial { rejected: 2, message: "bad".into() })));
        let js = br#"{"partialSuccess":{"rejectedLogRecords":5}}"#;
        assert_eq!(partial_success(js, true), Ok(Some(Partial { rejected: 5, message: String::new() })));
        assert!(partial_success(b"<html>", false).is_err());
        assert!(partial_success(&[0x0a, 0x30, 0x08], false).is_err(), "a length past the end");
    }

    #[test]
    fn error_messages_from_status_or_text() {
        // google.rpc.Status { code: 3, message: "no" }
        assert_eq!(error_message(&[0x08, 0x03, 0x12, 0x02, b'n', b'o']), "no");
        assert_eq!(error_message(br#"{"code":3,"message":"bad attr"}"#), "bad attr");
        assert_eq!(error_message(b"upstream connect error\n"), "upstream connect error");
    }
}
