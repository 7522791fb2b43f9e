//! Program paths as the process that ran them sees them. The kernel reads a program's path up
//! to the root of its file system (`/bin/busybox` on a container's overlay); the mount point
//! goes in front, taken from the mount table of *the process that made the entry*
//! (`/proc/PID/mountinfo`: its own mount namespace), so a program in a container is named as
//! the container sees it, the same for every replica, and a host program is named by its host
//! path even when the agent itself runs in a container.
//!
//! A process that is gone by then is named from what other processes showed of its file
//! system (remembered per device; the agent names the programs of live processes first),
//! else from the host's table (`/proc/1/mountinfo`, the agent's own where that is not
//! readable). An overlay file system is a container's root (Docker's, containerd's, podman's,
//! CRI-O's): its programs keep their path from its root, as the container saw them, wherever
//! the host mounts it. A file system mounted nowhere that is known is a container's that has
//! gone (an anonymous device: overlay, tmpfs) and keeps its path as is too; a block device gets
//! `MAJOR:MINOR:` in front.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::{kernel::scope::unescape_mount, model::names::escape_name};

/// One line of a mountinfo: the file system's device, the directory of it that is mounted
/// (`root`, `/` for the whole), and where (`point`, "" for `/`), both escaped as names are.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    dev: u64,
    root: String,
    point: String,
    /// An overlay file system (a container's root).
    overlay: bool,
}

impl Mount {
    /// `below` (a path from the file system's root) as seen through this mount, if it is
    /// under the mount's root.
    fn path_of(&self, below: &str) -> Option<String> {
        let rest = if self.root == "/" {
            below
        } else {
            let rest = below.strip_prefix(self.root.as_str())?;
            if !rest.is_empty() && !rest.starts_with('/') {
                return None;
            }
            rest
        };
        Some(format!("{}{rest}", self.point))
    }
}

/// A mount namespace's table, as `/proc/PID/mountinfo` lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MountTable(Vec<Mount>);

impl MountTable {
    fn parse(text: &str) -> Self {
        let mut out = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(devno), Some(root), Some(point)) = (f.get(2), f.get(3), f.get(4)) else { continue };
            let Some((major, minor)) = devno.split_once(':') else { continue };
            let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else { continue };
            let escaped = |s: &str| escape_name(unescape_mount(s).as_bytes());
            let point = if *point == "/" { String::new() } else { escaped(point) };
            let fstype = line.split_once(" - ").and_then(|(_, post)| post.split_whitespace().next());
            out.push(Mount { dev: libc::makedev(major, minor), root: escaped(root), point, overlay: fstype == Some("overlay") });
        }
        MountTable(out)
    }

    /// The mount of `dev` that shows `below` with the most of its file system mounted (the
    /// shortest root; the first listed among equals), and the path through it.
    fn resolve(&self, dev: u64, below: &str) -> Option<(&Mount, String)> {
        self.0
            .iter()
            .filter(|m| m.dev == dev)
            .filter_map(|m| Some((m, m.path_of(below)?)))
            .min_by_key(|(m, _)| if m.root == "/" { 0 } else { m.root.len() })
    }
}

/// Names program paths (see the module's documentation).
#[derive(Default)]
pub(crate) struct Mounts {
    /// The host's table, read again on a miss at most once a second.
    host: MountTable,
    read: Option<Instant>,
    /// The mount each device was last seen through, in any process's namespace.
    seen: HashMap<u64, Mount>,
    /// The tables of the processes read since [`Mounts::new_read`] (None: gone), so a process
    /// with many new programs is read once per read of the kernel's maps.
    tables: HashMap<u32, Option<MountTable>>,
}

/// A bound on remembered devices (each container's root is one): past it they are forgotten.
const MAX_SEEN: usize = 4096;

impl Mounts {
    /// The path of the program at `below` on `dev` (from the kernel, escaped) as process `pid`
    /// sees it; None when the process is gone (then [`Mounts::known_path`], once the live
    /// processes' programs are named).
    pub(crate) fn own_path(&mut self, dev: u64, below: &str, pid: u32) -> Option<String> {
        let own = match self.tables.remove(&pid) {
            Some(table) => table,
            None => std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok().map(|t| MountTable::parse(&t)),
        };
        let path = own.as_ref().map(|table| self.through(dev, below, table));
        self.tables.insert(pid, own);
        path
    }

    /// Forgets the processes' tables read before: a new read of the kernel's maps begins.
    pub(crate) fn new_read(&mut self) {
        self.tables.clear();
    }

    /// Through the process's own table `own`; what it does not mount, as [`Mounts::known_path`].
    fn through(&mut self, dev: u64, below: &str, own: &MountTable) -> String {
        let Some((mount, path)) = own.resolve(dev, below) else { return self.known_path(dev, below) };
        if self.seen.len() >= MAX_SEEN {
            self.seen.clear();
        }
        self.seen.insert(dev, mount.clone());
        path
    }

    /// The path of the program at `below` on `dev` for a process that is gone: through the
    /// mount it was last seen through, else the host's.
    pub(crate) fn known_path(&mut self, dev: u64, below: &str) -> String {
        if let Some(path) = self.seen.get(&dev).and_then(|m| m.path_of(below)) {
            return path;
        }
        if self.host.resolve(dev, below).is_none() && self.read.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            self.read = Some(Instant::now());
            let text = std::fs::read_to_string("/proc/1/mountinfo").or_else(|_| std::fs::read_to_string("/proc/self/mountinfo"));
            self.host = MountTable::parse(&text.unwrap_or_default());
        }
        match self.host.resolve(dev, below) {
            Some((m, _)) if m.overlay && m.root == "/" && !m.point.is_empty() => below.to_owned(),
            Some((_, path)) => path,
            None if libc::major(dev) == 0 => below.to_owned(),
            None => format!("{}:{}:{below}", libc::major(dev), libc::minor(dev)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "22 1 254:0 / / rw - ext4 /dev/vda rw\n\
        30 22 0:25 / /sys/fs/cgroup/unified rw - cgroup2 none rw\n\
        31 22 254:0 /srv /mnt/srv rw - ext4 /dev/vda rw\n\
        32 22 8:1 / /mnt/with\\040space rw - ext4 /dev/sda1 rw\n\
        40 22 0:61 / /run/containerd/io.containerd.runtime.v2.task/default/c1/rootfs rw - overlay overlay rw\n";

    /// A container on an overlay (0:61), and one whose root is a directory of the host's disk
    /// (podman's vfs driver), each in its own namespace.
    const OVERLAY_CONTAINER: &str =
        "500 400 0:61 / / rw - overlay overlay rw\n501 500 254:0 /var/lib/c1/hosts /etc/hosts rw - ext4 /dev/vda rw\n";
    const DIR_CONTAINER: &str = "600 400 254:0 /var/lib/containers/vfs/dir/abc / rw - ext4 /dev/vda rw\n601 600 254:0 /var/lib/containers/run/abc/hosts /etc/hosts rw - ext4 /dev/vda rw\n";

    fn mounts() -> Mounts {
        Mounts { host: MountTable::parse(HOST), read: Some(Instant::now()), seen: HashMap::new(), tables: HashMap::new() }
    }

    #[test]
    fn tables_are_read_with_roots_and_escapes() {
        let t = MountTable::parse(HOST);
        assert_eq!(t.0.len(), 5);
        assert_eq!(t.0[0], Mount { dev: libc::makedev(254, 0), root: "/".into(), point: String::new(), overlay: false });
        assert!(t.0[4].overlay);
        assert_eq!(t.0[2].root, "/srv");
        assert_eq!(t.0[3].point, "/mnt/with space");
        // A path is shown through the mount of its whole file system, not a bind of part.
        assert_eq!(t.resolve(libc::makedev(254, 0), "/srv/x").unwrap().1, "/srv/x");
        assert_eq!(t.resolve(libc::makedev(8, 1), "/bin/a").unwrap().1, "/mnt/with space/bin/a");
        assert!(t.resolve(libc::makedev(9, 9), "/bin/a").is_none());
    }

    #[test]
    fn a_container_program_is_named_as_the_container_sees_it() {
        let mut m = mounts();
        let overlay = libc::makedev(0, 61);
        let own = MountTable::parse(OVERLAY_CONTAINER);
        assert_eq!(m.through(overlay, "/bin/busybox", &own), "/bin/busybox");
        assert_eq!(m.known_path(overlay, "/bin/busybox"), "/bin/busybox", "remembered from the container's process");
        // The host mounts the overlay at the container's bundle; named from its root all the same.
        let mut fresh = mounts();
        assert_eq!(fresh.known_path(overlay, "/bin/busybox"), "/bin/busybox");
        // A container's root on the host's disk: the directory is the container's `/`.
        let disk = libc::makedev(254, 0);
        let own = MountTable::parse(DIR_CONTAINER);
        assert_eq!(m.through(disk, "/var/lib/containers/vfs/dir/abc/bin/t", &own), "/bin/t");
        // A host program run from the host is its host path, also for a process of the host
        // seen from an agent in a container.
        assert_eq!(m.through(disk, "/usr/bin/dash", &MountTable::parse(HOST)), "/usr/bin/dash");
        // Outside the container's root, and the process gone: the host's table.
        assert_eq!(m.known_path(disk, "/usr/bin/dash"), "/usr/bin/dash");
        assert_eq!(m.known_path(libc::makedev(8, 1), "/bin/a"), "/mnt/with space/bin/a");
    }

    #[test]
    fn a_file_system_mounted_nowhere_known() {
        let mut m = mounts();
        assert_eq!(m.known_path(libc::makedev(0, 77), "/bin/sh"), "/bin/sh", "a gone container's overlay");
        assert_eq!(m.known_path(libc::makedev(8, 17), "/bin/sh"), "8:17:/bin/sh", "an unmounted disk");
    }
}
