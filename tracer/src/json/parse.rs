//! Reading JSON values back: each getter names the field that is missing
//! or of the wrong type.

use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("field `{0}` is missing or has the wrong type")]
    Field(&'static str),
}

pub(crate) fn field<'a>(
    m: &'a Map<String, Value>,
    k: &'static str,
) -> Result<&'a Value, ParseError> {
    m.get(k).ok_or(ParseError::Field(k))
}

pub(crate) fn get_u64(m: &Map<String, Value>, k: &'static str) -> Result<u64, ParseError> {
    field(m, k)?.as_u64().ok_or(ParseError::Field(k))
}

pub(crate) fn get_opt_u64(
    m: &Map<String, Value>,
    k: &'static str,
) -> Result<Option<u64>, ParseError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(ParseError::Field(k)),
    }
}

pub(crate) fn get_opt_u32(
    m: &Map<String, Value>,
    k: &'static str,
) -> Result<Option<u32>, ParseError> {
    get_opt_u64(m, k)?
        .map(|v| u32::try_from(v).map_err(|_| ParseError::Field(k)))
        .transpose()
}

pub(crate) fn get_opt_i64(
    m: &Map<String, Value>,
    k: &'static str,
) -> Result<Option<i64>, ParseError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or(ParseError::Field(k)),
    }
}

fn parse_hex(v: &Value) -> Option<u64> {
    let s = v.as_str()?;
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

pub(crate) fn get_hex(m: &Map<String, Value>, k: &'static str) -> Result<u64, ParseError> {
    field(m, k)
        .ok()
        .and_then(parse_hex)
        .ok_or(ParseError::Field(k))
}

pub(crate) fn get_opt_hex(
    m: &Map<String, Value>,
    k: &'static str,
) -> Result<Option<u64>, ParseError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => parse_hex(v).map(Some).ok_or(ParseError::Field(k)),
    }
}

pub(crate) fn get_dim(m: &Map<String, Value>, k: &'static str) -> Result<[u32; 3], ParseError> {
    let arr = field(m, k)?.as_array().ok_or(ParseError::Field(k))?;
    let mut out = [0u32; 3];
    if arr.len() != 3 {
        return Err(ParseError::Field(k));
    }
    for (o, v) in out.iter_mut().zip(arr) {
        *o = v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(ParseError::Field(k))?;
    }
    Ok(out)
}
