//! The crate's tests. Module names say which promise is under test; test
//! names say what they prove. Everything that runs placed code is Linux-only
//! (it also runs under qemu-aarch64 for the arm64 leg).

mod input;
#[cfg(target_os = "linux")]
mod place;
#[cfg(target_os = "linux")]
mod probe;
#[cfg(target_os = "linux")]
mod reuse;
#[cfg(target_os = "linux")]
mod seal;
#[cfg(target_os = "linux")]
mod wx;

#[cfg(target_os = "linux")]
pub(crate) use support::*;

#[cfg(target_os = "linux")]
mod support {
    use crate::PlacedCode;

    /// Calls placed code as `extern "C" fn() -> u32`.
    pub(crate) fn call(code: &PlacedCode) -> u32 {
        // SAFETY: every test places a whole `extern "C" fn() -> u32` at the start.
        let f = unsafe { std::mem::transmute::<*const u8, extern "C" fn() -> u32>(code.as_ptr()) };
        f()
    }

    /// One line of /proc/self/maps.
    #[derive(Debug, Clone)]
    pub(crate) struct MapLine {
        pub(crate) start: usize,
        pub(crate) end: usize,
        pub(crate) perms: String,
        pub(crate) line: String,
    }

    impl MapLine {
        pub(crate) fn contains(&self, p: *const u8) -> bool {
            (self.start..self.end).contains(&(p as usize))
        }
    }

    pub(crate) fn read_maps() -> Vec<MapLine> {
        let text = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
        text.lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let (start, end) = fields.next()?.split_once('-')?;
                Some(MapLine {
                    start: usize::from_str_radix(start, 16).ok()?,
                    end: usize::from_str_radix(end, 16).ok()?,
                    perms: fields.next()?.to_owned(),
                    line: line.to_owned(),
                })
            })
            .collect()
    }

    /// The mapping that holds `p`.
    pub(crate) fn mapping_of(maps: &[MapLine], p: *const u8) -> Option<&MapLine> {
        maps.iter().find(|m| m.contains(p))
    }

    /// The mapping that holds `p`, which the caller keeps mapped, read afresh
    /// until the listing shows it. Natively the first read does. qemu-user
    /// builds its /proc/self/maps from the host's mappings and drops a host
    /// mapping whose guest pages disagree; while another thread's mprotect is
    /// half done, the kernel may have merged that thread's pages with ours, and
    /// for that instant our held pages are missing from the listing.
    pub(crate) fn mapping_holding(p: *const u8) -> MapLine {
        for _ in 0..1000 {
            let maps = read_maps();
            if let Some(i) = maps.iter().position(|m| m.contains(p)) {
                return maps.into_iter().nth(i).expect("index from position");
            }
            std::thread::yield_now();
        }
        panic!("{p:p} is held mapped, yet 1000 reads of /proc/self/maps never showed it");
    }

    /// Forks; the child runs `child` (async-signal-safe work only) and exits
    /// with its return value. Returns the raw wait status.
    pub(crate) fn fork_child(child: impl FnOnce() -> libc::c_int) -> libc::c_int {
        // SAFETY: the child runs only `child`, which callers keep to
        // async-signal-safe work, and then `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: plain syscalls in the child: no core file, default fault handling.
            unsafe {
                libc::setrlimit(libc::RLIMIT_CORE, &no_core);
                libc::signal(libc::SIGSEGV, libc::SIG_DFL);
                libc::signal(libc::SIGBUS, libc::SIG_DFL);
            }
            let code = child();
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child, writing into a local.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            if r == pid {
                return status;
            }
            let err = std::io::Error::last_os_error();
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::Interrupted,
                "waitpid: {err}"
            );
        }
    }

    /// Says something about this host on stderr, past the test harness's
    /// output capture, so that a path a host cannot exercise is visible in
    /// every run rather than silently passing.
    pub(crate) fn note(msg: &str) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "NOTE {msg}");
    }

    /// True when this arm64 process runs under a user-mode emulator: qemu-user
    /// shows the host's x86 /proc/cpuinfo (with `vendor_id`) to the guest.
    pub(crate) fn emulated_arm64() -> bool {
        cfg!(target_arch = "aarch64")
            && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains("vendor_id"))
    }

    /// errno after a failed libc call.
    pub(crate) fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}
