//! What the launched program's ELF file says about its `main`, so that a uprobe on `main` that
//! cannot attach is explained in the user's terms ("stripped") rather than by the loader
//! library's symbol-resolution error.
use std::{os::unix::ffi::OsStrExt as _, path::Path};

use crate::model::names::escape_name;

/// What an ELF file's own symbol tables (`.symtab`, `.dynsym`) and `.gnu_debuglink` say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SymbolFacts {
    /// A symbol of this name is defined (has a section) in one of the tables.
    pub(crate) defines: bool,
    /// The separate debug file `.gnu_debuglink` names, when there is one.
    pub(crate) debuglink: Option<Vec<u8>>,
}

/// Looks `name` up in a 32- or 64-bit little-endian ELF file; None when `b` is not one, or its
/// section headers do not parse.
pub(crate) fn symbol_facts(b: &[u8], name: &[u8]) -> Option<SymbolFacts> {
    if b.get(..4)? != b"\x7fELF" || *b.get(5)? != 1 {
        return None;
    }
    let wide = *b.get(4)? == 2;
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o.checked_add(2)?)?.try_into().ok()?) as usize);
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o.checked_add(4)?)?.try_into().ok()?) as usize);
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o.checked_add(8)?)?.try_into().ok()?) as usize);
    let word_at = |o: usize| if wide { u64_at(o) } else { u32_at(o) };
    let (shoff, shentsize, shnum, shstrndx) = if wide {
        (u64_at(0x28)?, u16_at(0x3a)?, u16_at(0x3c)?, u16_at(0x3e)?)
    } else {
        (u32_at(0x20)?, u16_at(0x2e)?, u16_at(0x30)?, u16_at(0x32)?)
    };
    // A section header: (name, type, offset, size, link, entry size).
    let section = |i: usize| -> Option<(usize, usize, usize, usize, usize, usize)> {
        let sh = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let at = if wide { [0x18, 0x20, 0x28, 0x38] } else { [0x10, 0x14, 0x18, 0x24] };
        Some((u32_at(sh)?, u32_at(sh + 4)?, word_at(sh + at[0])?, word_at(sh + at[1])?, u32_at(sh + at[2])?, word_at(sh + at[3])?))
    };
    let contents = |i: usize| -> Option<&[u8]> {
        let (_, _, offset, size, _, _) = section(i)?;
        b.get(offset..offset.checked_add(size)?)
    };
    let c_string = |table: &'_ [u8], at: usize| -> Option<Vec<u8>> { Some(table.get(at..)?.split(|&c| c == 0).next()?.to_vec()) };
    let names = contents(shstrndx);
    let mut facts = SymbolFacts { defines: false, debuglink: None };
    for i in 0..shnum {
        let (sh_name, kind, offset, size, link, entsize) = section(i)?;
        if names.and_then(|n| c_string(n, sh_name)).as_deref() == Some(b".gnu_debuglink") {
            facts.debuglink = contents(i).and_then(|c| c_string(c, 0)).filter(|f| !f.is_empty());
        }
        const SHT_SYMTAB: usize = 2;
        const SHT_DYNSYM: usize = 11;
        if (kind != SHT_SYMTAB && kind != SHT_DYNSYM) || entsize == 0 {
            continue;
        }
        let strings = contents(link)?;
        for j in 0..size / entsize {
            let sym = offset.checked_add(j.checked_mul(entsize)?)?;
            let (st_name, st_shndx) = if wide { (u32_at(sym)?, u16_at(sym + 6)?) } else { (u32_at(sym)?, u16_at(sym + 14)?) };
            // SHN_UNDEF: a reference to a symbol of another object, not a definition.
            if st_shndx != 0 && c_string(strings, st_name).as_deref() == Some(name) {
                facts.defines = true;
            }
        }
    }
    Some(facts)
}

/// Why image start to main is not measured when the uprobe on `main` of `program` could not
/// attach (`err`): a program without a `main` symbol (stripped) or a script is said as such,
/// with what to do; anything else as the error says.
pub(crate) fn main_not_probed(program: &Path, err: &anyhow::Error) -> String {
    let name = escape_name(program.as_os_str().as_bytes());
    let bytes = std::fs::read(program).unwrap_or_default();
    if bytes.starts_with(b"#!") {
        return format!(
            "image start to main: not measured, {name} is a script: the uprobe goes on the launched program's `main`; \
             launch an ELF program built with symbols to measure it"
        );
    }
    match symbol_facts(&bytes, b"main") {
        Some(SymbolFacts { defines: false, debuglink }) => {
            // Looked for where the uprobe's symbol lookup looks: beside the program.
            let (debug_file, or_put_it_there) = debuglink.map_or((String::new(), ""), |file| {
                let at = program.parent().unwrap_or(Path::new("")).join(std::ffi::OsStr::from_bytes(&file));
                let (state, fix) =
                    if at.exists() { ("does not define it either", "") } else { ("is not there", "put that file there, or ") };
                (
                    format!(", and the separate debug file its .gnu_debuglink names, {}, {state}", escape_name(at.as_os_str().as_bytes())),
                    fix,
                )
            });
            format!(
                "image start to main: not measured, {name} has no `main` symbol (it is stripped{debug_file}), so no uprobe \
                 can mark main; {or_put_it_there}build it with symbols (do not strip it: no `strip`, `install -s` or `-s` at \
                 link time) and run again"
            )
        }
        _ => format!("image start to main: not measured, no uprobe on main in {name} ({err:#})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn run(cmd: &mut Command) {
        let status = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(status.success(), "{cmd:?} failed");
    }

    /// A program built with gcc has `main`; stripped it has not, nor when a debug link names
    /// a file that is not there; each case gets its message. gcc, strip and objcopy are the
    /// build machine's (binutils).
    #[test]
    fn a_stripped_program_is_said_to_have_no_main() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("p.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let (full, plain, linked) = (dir.path().join("full"), dir.path().join("plain"), dir.path().join("linked"));
        run(Command::new("cc").arg("-O2").arg("-o").arg(&full).arg(&src));
        run(Command::new("strip").arg("-o").arg(&plain).arg(&full));
        let debug = dir.path().join("linked.debug");
        run(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&debug));
        run(Command::new("objcopy").arg("--strip-all").arg(format!("--add-gnu-debuglink={}", debug.display())).arg(&full).arg(&linked));
        std::fs::remove_file(&debug).unwrap();

        let facts = |p: &Path| symbol_facts(&std::fs::read(p).unwrap(), b"main").expect("an ELF file");
        assert_eq!(facts(&full), SymbolFacts { defines: true, debuglink: None });
        assert_eq!(facts(&plain), SymbolFacts { defines: false, debuglink: None });
        assert_eq!(facts(&linked), SymbolFacts { defines: false, debuglink: Some(b"linked.debug".to_vec()) });
        assert!(!symbol_facts(&std::fs::read(&full).unwrap(), b"no_such_function").unwrap().defines);
        // The dynamic symbol table counts too; an undefined reference (to libc's) does not.
        assert!(!symbol_facts(&std::fs::read(&plain).unwrap(), b"__libc_start_main").unwrap().defines);

        let err = anyhow::anyhow!("error resolving symbol: failed to access debuglink file");
        let said = main_not_probed(&plain, &err);
        assert!(said.contains("/plain has no `main` symbol (it is stripped), so no uprobe can mark main; build it with symbols"), "{said}");
        let said = main_not_probed(&linked, &err);
        assert!(
            said.contains("has no `main` symbol (it is stripped, and the separate debug file its .gnu_debuglink names, ")
                && said.contains("/linked.debug, is not there), so no uprobe can mark main; put that file there, or build it with symbols"),
            "{said}"
        );
        assert!(!said.contains("failed to access"), "{said}");
        // A program that has main but failed otherwise keeps the error.
        assert_eq!(
            main_not_probed(&full, &err),
            format!("image start to main: not measured, no uprobe on main in {} ({err})", full.display())
        );
        let script = dir.path().join("s\x1b.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let said = main_not_probed(&script, &err);
        assert!(said.contains("/s\\x1b.sh is a script"), "{said}");
    }

    /// The 32-bit layout of the tables: a program of the machine's 32-bit ABI (i386 from
    /// gcc-multilib's `cc -m32`; on arm64, armhf from Debian's cross gcc), whole and stripped.
    #[test]
    fn a_32_bit_program_is_read_too() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("p.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let (full, plain) = (dir.path().join("full32"), dir.path().join("plain32"));
        let (cc, flags, strip): (&str, &[&str], &str) = if cfg!(target_arch = "aarch64") {
            ("arm-linux-gnueabihf-gcc", &[], "arm-linux-gnueabihf-strip")
        } else {
            ("cc", &["-m32"], "strip")
        };
        // Static, as the suite's other 32-bit programs: the guests' userlands have the 32-bit
        // C libraries' static archives, and a dynamic -m32 link failed there.
        let built = Command::new(cc).args(flags).args(["-static", "-o"]).arg(&full).arg(&src).status().is_ok_and(|s| s.success());
        assert!(built, "{cc} {flags:?} cannot build a 32-bit program here: `cargo xtask setup` installs what it needs");
        run(Command::new(strip).arg("-o").arg(&plain).arg(&full));
        let facts = |p: &Path| symbol_facts(&std::fs::read(p).unwrap(), b"main").expect("an ELF file");
        assert_eq!(facts(&full), SymbolFacts { defines: true, debuglink: None });
        assert_eq!(facts(&plain), SymbolFacts { defines: false, debuglink: None });
    }

    #[test]
    fn what_is_not_elf_is_not_read_as_elf() {
        assert_eq!(symbol_facts(b"#!/bin/sh\n", b"main"), None);
        assert_eq!(symbol_facts(b"\x7fELF", b"main"), None);
        let mut truncated = std::fs::read("/bin/true").unwrap();
        truncated.truncate(64);
        assert_eq!(symbol_facts(&truncated, b"main"), None, "section headers past the end");
    }
}
