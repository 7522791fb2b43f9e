//! A minimal writer for the "newc" cpio format the kernel unpacks as an initramfs.
#[derive(Default)]
pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.ino += 1;
        let name_len = name.len() + 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            name_len,
            0
        );
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[], (0, 0));
    }

    pub fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100000 | perm, data, (0, 0));
    }

    pub fn char_device(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020600, &[], (major, minor));
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_trailer_ends() {
        let mut c = Cpio::default();
        c.file("init", b"abc", 0o755);
        let out = c.finish();
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        // header 110 bytes + "init\0" (5) = 115, padded to 116; data 3 padded to 4.
        assert_eq!(&out[116..119], b"abc");
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
