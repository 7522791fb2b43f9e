//! Varints, zigzag, wrapping deltas, and a bounds-checked cursor over untrusted bytes.

pub(super) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Wrapping delta: exact for any pair of u64, small when `new` is near `old` on either side.
pub(super) fn delta64(new: u64, old: u64) -> u64 {
    zigzag(new.wrapping_sub(old) as i64)
}

pub(super) fn undelta64(old: u64, z: u64) -> u64 {
    old.wrapping_add(unzigzag(z) as u64)
}

pub(super) fn delta32(new: u32, old: u32) -> u64 {
    zigzag(i64::from(new) - i64::from(old))
}

pub(super) fn undelta32(old: u32, z: u64, what: &str) -> Result<u32, String> {
    i64::from(old)
        .checked_add(unzigzag(z))
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("the {what} delta leaves the range of a u32"))
}

/// A bounds-checked reader over untrusted bytes: every access can fail, none can panic.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(super) fn byte(&mut self) -> Result<u8, String> {
        let b = *self.buf.get(self.pos).ok_or("the data ends in the middle of an item")?;
        self.pos += 1;
        Ok(b)
    }

    pub(super) fn take(&mut self, len: u64) -> Result<&'a [u8], String> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let n = usize::try_from(len)
            .ok()
            .filter(|&n| n <= rest.len())
            .ok_or_else(|| format!("a length of {len} bytes runs past the end of the data"))?;
        self.pos += n;
        Ok(rest.split_at(n).0)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let bytes = self.take(N as u64)?;
        bytes.try_into().map_err(|_| "short read".to_string())
    }

    pub(super) fn u32_le(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    pub(super) fn u64_le(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }

    pub(super) fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            if i == 9 && b > 1 {
                return Err("bad varint (more than 64 bits)".into());
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("bad varint (longer than 10 bytes)".into())
    }

    pub(super) fn varint_u32(&mut self, what: &str) -> Result<u32, String> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| format!("the {what} {v} does not fit in a u32"))
    }
}
