//! The gateway under test as a child process: spawned in its own process
//! group, its output kept in the run directory, its resident memory sampled
//! from /proc, and the whole group ended at the end (also on error: the
//! group is killed when the handle is dropped).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Why the gateway could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The program could not be run.
    #[error("cannot start the gateway `{program}`: {cause}")]
    Exec {
        /// The program.
        program: String,
        /// The cause.
        cause: std::io::Error,
    },
    /// It exited before it was ready.
    #[error("the gateway exited before it was ready ({status}); its output is in {log}")]
    Exited {
        /// Its exit status.
        status: String,
        /// Where its output went.
        log: PathBuf,
    },
    /// It did not become ready in time.
    #[error("the gateway was not ready at {addr} within {waited:?} (the scenario's [gateway] ready_timeout gives it more time); its output is in {log}")]
    NotReady {
        /// Where it should listen.
        addr: String,
        /// How long we waited.
        waited: Duration,
        /// Where its output went.
        log: PathBuf,
    },
    /// The command is empty.
    #[error("empty gateway command")]
    EmptyCommand,
    /// Its output file in the run directory could not be opened.
    #[error("cannot open {} for the gateway's output: {source}", path.display())]
    Log {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The process group of the gateway alive now (0: none), so that a second
/// Ctrl-C, which exits at once, can still end it.
static LIVE_GROUP: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Kills the gateway's process group at once, if one is alive. For the
/// exit-now path; the normal path is [`GatewayProcess::stop`].
pub fn kill_live_group() {
    let pgid = LIVE_GROUP.swap(0, std::sync::atomic::Ordering::SeqCst);
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// A running gateway process group.
pub struct GatewayProcess {
    child: Child,
    pgid: Pid,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its combined output.
    pub log: PathBuf,
}

/// Picks a free loopback port by binding port 0 and letting it go. Another
/// process could take it in between; the readiness check would then fail
/// with a clear message rather than measure the wrong server.
pub fn free_port() -> std::io::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.local_addr()
}

impl GatewayProcess {
    /// Spawns `argv` in a new process group with `env`, its stdout and
    /// stderr appended to `log`; it is to listen on `listen` (its command
    /// line says so: the harness chose the port).
    pub fn spawn(
        argv: &[String],
        env: &[(String, String)],
        log: &Path,
        listen: SocketAddr,
        limit: Option<&MemoryLimit>,
    ) -> Result<GatewayProcess, SpawnError> {
        let (program, rest) = argv.split_first().ok_or(SpawnError::EmptyCommand)?;
        let log_error = |source| SpawnError::Log {
            path: log.to_path_buf(),
            source,
        };
        // Appended to: a restarted gateway writes after its earlier life.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(log_error)?;
        let err_file = file.try_clone().map_err(log_error)?;
        let mut cmd = Command::new(program);
        // The time scale reaches a gateway only when the harness says so
        // (see wire::Scale), never by inheritance from our environment.
        cmd.args(rest)
            .env_remove("REHEARSE_TIME_SCALE")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stderr(Stdio::from(err_file))
            .process_group(0);
        if let Some(limit) = limit {
            limit.apply_on_exec(&mut cmd);
        }
        cmd.stdout(Stdio::from(file.try_clone().map_err(log_error)?));
        let child = cmd.spawn().map_err(|cause| SpawnError::Exec {
            program: program.clone(),
            cause,
        })?;
        let pgid = Pid::from_raw(child.id() as i32);
        LIVE_GROUP.store(pgid.as_raw(), std::sync::atomic::Ordering::SeqCst);
        Ok(GatewayProcess {
            child,
            pgid,
            addr: listen,
            log: log.to_path_buf(),
        })
    }

    /// The process id of the group leader.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Some(status) if the leader has exited.
    pub fn exited(&mut self) -> Option<String> {
        self.child.try_wait().ok().flatten().map(|s| s.to_string())
    }

    /// Ends the whole group: SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        let _ = LIVE_GROUP.compare_exchange(
            self.pgid.as_raw(),
            0,
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
        );
        let _ = killpg(self.pgid, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Children of the leader may outlive it: end the group regardless.
        let _ = killpg(self.pgid, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = killpg(self.pgid, Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// A memory limit for the gateway's processes: a cgroup where this machine
/// lets us make one (v2, else v1), else an address-space limit.
#[derive(Debug)]
pub struct MemoryLimit {
    bytes: u64,
    kind: LimitKind,
}

#[derive(Debug)]
enum LimitKind {
    /// A cgroup directory and its `cgroup.procs` path, ready for `pre_exec`.
    Cgroup {
        dir: PathBuf,
        procs: std::ffi::CString,
        v2: bool,
    },
    /// `RLIMIT_AS`: coarser (it counts reserved address space, not resident
    /// memory), used only where no cgroup can be made.
    AddressSpace,
}

impl MemoryLimit {
    /// Prepares a limit of `bytes` for processes spawned later.
    pub fn new(bytes: u64, name: &str) -> MemoryLimit {
        match Self::cgroup(bytes, name) {
            Ok(kind) => MemoryLimit { bytes, kind },
            Err(e) => {
                tracing::info!(cause = %e, "no cgroup for the memory limit; using RLIMIT_AS");
                MemoryLimit {
                    bytes,
                    kind: LimitKind::AddressSpace,
                }
            }
        }
    }

    fn cgroup(bytes: u64, name: &str) -> std::io::Result<LimitKind> {
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let root = Path::new("/sys/fs/cgroup");
        // cgroup v2 with the memory controller delegated to our group.
        if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
            let parent = root.join(path.trim_start_matches('/'));
            let controllers =
                std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                let dir = parent.join(name);
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("memory.max"), bytes.to_string())?;
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                return Self::ready(dir, true);
            }
        }
        // cgroup v1: the memory hierarchy.
        if let Some(path) = own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            ctl.split(',').any(|c| c == "memory").then_some(path)
        }) {
            let dir = root
                .join("memory")
                .join(path.trim_start_matches('/'))
                .join(name);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())?;
            // Without swap accounting this file is absent; the limit still holds.
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
            return Self::ready(dir, false);
        }
        Err(std::io::Error::other("no writable memory cgroup"))
    }

    fn ready(dir: PathBuf, v2: bool) -> std::io::Result<LimitKind> {
        let procs = std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_encoded_bytes())
            .map_err(std::io::Error::other)?;
        Ok(LimitKind::Cgroup { dir, procs, v2 })
    }

    /// How the limit is enforced, for the report.
    pub fn describe(&self) -> String {
        let mib = self.bytes as f64 / 1048576.0;
        match &self.kind {
            LimitKind::Cgroup { dir, v2, .. } => format!(
                "{mib:.0} MiB, cgroup {} at {}",
                if *v2 { "v2" } else { "v1" },
                dir.display()
            ),
            LimitKind::AddressSpace => {
                format!("{mib:.0} MiB of address space (RLIMIT_AS; no cgroup here)")
            }
        }
    }

    /// Processes the kernel killed for going over the limit (cgroups only).
    pub fn oom_kills(&self) -> Option<u64> {
        let LimitKind::Cgroup { dir, v2, .. } = &self.kind else {
            return None;
        };
        let file = if *v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = std::fs::read_to_string(dir.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
    }

    fn apply_on_exec(&self, cmd: &mut Command) {
        match &self.kind {
            LimitKind::Cgroup { procs, .. } => {
                let procs = procs.clone();
                // SAFETY: between fork and exec only async-signal-safe calls
                // are allowed: open(2), write(2) and close(2) on a path and
                // bytes prepared before the fork; nothing allocates.
                unsafe {
                    cmd.pre_exec(move || {
                        let fd = nix::libc::open(
                            procs.as_ptr(),
                            nix::libc::O_WRONLY | nix::libc::O_CLOEXEC,
                        );
                        if fd < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        // "0" moves the writing process itself.
                        let n = nix::libc::write(fd, b"0".as_ptr().cast(), 1);
                        nix::libc::close(fd);
                        if n != 1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
            LimitKind::AddressSpace => {
                let bytes = self.bytes as nix::libc::rlim_t;
                // SAFETY: setrlimit(2) is async-signal-safe and the struct
                // lives on the child's stack.
                unsafe {
                    cmd.pre_exec(move || {
                        let lim = nix::libc::rlimit {
                            rlim_cur: bytes,
                            rlim_max: bytes,
                        };
                        if nix::libc::setrlimit(nix::libc::RLIMIT_AS, &lim) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
        }
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        if let LimitKind::Cgroup { dir, .. } = &self.kind {
            // Empty by now (the group was killed); a cgroup is removed with rmdir.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The resident memory of a process group, summed over its processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupMemory {
    /// The resident set, in bytes.
    pub rss: u64,
    /// Its anonymous part (`RssAnon` in /proc/PID/status), in bytes;
    /// `None` when a process of the group did not give it (a kernel before
    /// 4.5, or a process that ended between the two reads).
    pub anon: Option<u64>,
}

/// Sums the resident memory of all processes whose process group is
/// `pgid`, and its anonymous part.
pub fn group_memory(pgid: i32) -> GroupMemory {
    let page = page_size();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return GroupMemory::default();
    };
    let mut total = GroupMemory {
        rss: 0,
        anon: Some(0),
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name (field 2) may hold spaces and parentheses: the
        // fields after it start after the last ')'.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        // After ')': state(3) ppid(4) pgrp(5) ... rss is field 24.
        let pgrp: i32 = fields.get(2).and_then(|v| v.parse().ok()).unwrap_or(-1);
        if pgrp != pgid {
            continue;
        }
        let rss_pages: u64 = fields.get(21).and_then(|v| v.parse().ok()).unwrap_or(0);
        total.rss += rss_pages * page;
        let anon = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| rss_anon(&status));
        total.anon = total.anon.zip(anon).map(|(sum, one)| sum + one);
    }
    total
}

/// The `RssAnon:` line of a /proc/PID/status text, in bytes (the kernel
/// writes it in kB).
fn rss_anon(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("RssAnon:"))?;
    let kb: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb * 1024)
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |v| v as u64)
}

/// Reads a Prometheus text exposition and returns the first sample of
/// `metric` (any labels).
pub fn prometheus_value(text: &str, metric: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = l.strip_prefix(metric)?;
        let rest = if rest.starts_with('{') {
            &rest[rest.find('}')? + 1..]
        } else if rest.starts_with(' ') {
            rest
        } else {
            return None;
        };
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_values_are_found() {
        let t = "# HELP x\nprocess_resident_memory_bytes_total 1\nprocess_resident_memory_bytes{pid=\"1\"} 2.5e7\n";
        assert_eq!(
            prometheus_value(t, "process_resident_memory_bytes"),
            Some(2.5e7)
        );
        assert_eq!(prometheus_value("a 1\n", "b"), None);
    }

    #[test]
    fn rss_anon_is_read_from_a_status_text() {
        let status =
            "Name:\tgw\nVmRSS:\t    1700 kB\nRssAnon:\t     112 kB\nRssFile:\t    1588 kB\n";
        assert_eq!(rss_anon(status), Some(112 * 1024));
        assert_eq!(rss_anon("Name:\tgw\nVmRSS:\t 1700 kB\n"), None);
        assert_eq!(rss_anon("RssAnon:\t lots\n"), None);
    }

    #[test]
    fn group_memory_sees_a_spawned_group_and_stop_ends_it() {
        let dir = std::env::temp_dir().join(format!("rehearse-gp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("gw.log");
        // A shell that starts a child sleeping in the same group.
        let argv: Vec<String> = ["sh", "-c", "sleep 30 & sleep 30"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut p =
            GatewayProcess::spawn(&argv, &[], &log, "127.0.0.1:1".parse().unwrap(), None).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let m = group_memory(p.pid() as i32);
        assert!(m.rss > 0);
        // This machine's /proc gives the anonymous part (Linux 4.5 on): a
        // part of the resident set, some of it.
        let anon = m.anon.expect("RssAnon in /proc/PID/status");
        assert!(anon > 0 && anon < m.rss, "{m:?}");
        let pgid = p.pid() as i32;
        p.stop(Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(group_memory(pgid).rss, 0, "the whole group is gone");
    }

    #[test]
    fn a_memory_limit_kills_a_process_that_outgrows_it() {
        let dir = std::env::temp_dir().join(format!("rehearse-gp3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("gw.log");
        let limit = MemoryLimit::new(
            64 * 1024 * 1024,
            &format!("rehearse-test-{}", std::process::id()),
        );
        // python3 allocating and touching 256 MiB: killed by the cgroup
        // (SIGKILL) or refused by RLIMIT_AS (MemoryError, exit 1).
        let argv: Vec<String> = [
            "python3",
            "-c",
            "x = bytearray(256 * 1024 * 1024); print('survived')",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut p = GatewayProcess::spawn(
            &argv,
            &[],
            &log,
            "127.0.0.1:1".parse().unwrap(),
            Some(&limit),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = p.exited() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the process was not stopped by the limit"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            !status.contains("exit status: 0"),
            "{status}: {}",
            limit.describe()
        );
        assert!(!std::fs::read_to_string(&log).unwrap().contains("survived"));
        if let Some(kills) = limit.oom_kills() {
            assert!(kills >= 1, "{}", limit.describe());
        }
    }
}
