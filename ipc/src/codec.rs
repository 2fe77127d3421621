//! The body encoding. bincode 2 lives here and nowhere else, so the encoding
//! can be swapped (postcard is the likely successor) by changing this file.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::frame::MAX_FRAME_LIMIT;

/// Standard config (little-endian varints) with a hard decode limit so a
/// claimed container length can never allocate past the largest frame.
type Config = Configuration<LittleEndian, Varint, Limit<MAX_FRAME_LIMIT>>;

const CONFIG: Config = bincode::config::standard().with_limit::<MAX_FRAME_LIMIT>();

/// Appends the encoding of `value` to `out`.
pub(crate) fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), String> {
    bincode::serde::encode_into_std_write(value, out, CONFIG)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Decodes exactly one value that must fill `bytes` completely.
pub(crate) fn decode_exact<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, used) =
        bincode::serde::decode_from_slice::<T, _>(bytes, CONFIG).map_err(|e| e.to_string())?;
    if used != bytes.len() {
        return Err(format!(
            "{} trailing bytes after the message",
            bytes.len() - used
        ));
    }
    Ok(value)
}
