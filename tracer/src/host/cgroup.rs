//! Which container and Kubernetes pod a process runs in, read from its
//! cgroup path (`/proc/PID/cgroup`). Covers the layouts of the common
//! runtimes: the systemd cgroup driver (`kubepods-…-pod<uid>.slice/
//! cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`), the
//! cgroupfs driver (`/kubepods/<qos>/pod<uid>/<id>`) and plain Docker
//! (`/docker/<id>`), for cgroup v1 and v2.
use crate::model::Container;

/// Scope-unit prefixes of container runtimes under the systemd cgroup driver.
const SCOPE_PREFIXES: [&str; 6] = [
    "cri-containerd-",
    "crio-",
    "docker-",
    "libpod-",
    "containerd-",
    "cri-dockerd-",
];

/// Reads `/proc/PID/cgroup`; an unreadable or unmatched one gives nothing.
pub(crate) fn container_of(pid: u32) -> Container {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|text| parse_cgroup(&text))
        .unwrap_or_default()
}

/// Parses the text of `/proc/PID/cgroup` (v1 lines `N:controllers:/path`,
/// or the v2 line `0::/path`). The first line that names a container wins,
/// the v2 line first.
pub(crate) fn parse_cgroup(text: &str) -> Container {
    let paths = text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (Some(id), Some(_), Some(path)) = (f.next(), f.next(), f.next()) else {
                return None;
            };
            Some((id != "0", path))
        })
        .collect::<Vec<_>>();
    let mut ordered = paths;
    // The unified (v2) hierarchy first: false sorts before true.
    ordered.sort_by_key(|(v1, _)| *v1);
    let mut best = Container::default();
    for (_, path) in ordered {
        let c = parse_path(path);
        if best.container_id.is_none() {
            best.container_id = c.container_id;
        }
        if best.pod_uid.is_none() {
            best.pod_uid = c.pod_uid;
        }
        if best.container_id.is_some() && best.pod_uid.is_some() {
            break;
        }
    }
    best
}

/// One cgroup path.
pub(crate) fn parse_path(path: &str) -> Container {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut out = Container::default();
    for (i, part) in parts.iter().enumerate() {
        if let Some(uid) = pod_uid(part) {
            out.pod_uid = Some(uid);
            // cgroupfs driver: the container's cgroup is the pod's child.
            if let Some(next) = parts.get(i + 1) {
                if is_container_id(next) {
                    out.container_id = Some(next.to_string());
                }
            }
            continue;
        }
        if let Some(id) = part
            .strip_suffix(".scope")
            .and_then(|unit| SCOPE_PREFIXES.iter().find_map(|p| unit.strip_prefix(p)))
            .filter(|id| is_container_id(id))
        {
            out.container_id = Some(id.to_string());
            continue;
        }
        // Docker's cgroupfs layout: /docker/<id>.
        if *part == "docker" {
            if let Some(next) = parts.get(i + 1).filter(|n| is_container_id(n)) {
                out.container_id = Some(next.to_string());
            }
        }
    }
    out
}

/// `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid_with_underscores>.slice`.
fn pod_uid(part: &str) -> Option<String> {
    let raw = if let Some(unit) = part.strip_suffix(".slice") {
        let (_, uid) = unit.rsplit_once("-pod")?;
        if !unit.starts_with("kubepods") {
            return None;
        }
        uid
    } else {
        part.strip_prefix("pod")?
    };
    // systemd escapes '-' inside a unit name's component as '_'.
    let uid = raw.replace('_', "-");
    let valid = uid.len() >= 8
        && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        && uid.bytes().any(|b| b.is_ascii_hexdigit());
    valid.then_some(uid)
}

fn is_container_id(s: &str) -> bool {
    (12..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f3a1c9b8e7d6c5b4a39281706f5e4d3c2b1a0998877665544332211ffeeddcc";
    const UID: &str = "8a6b1f2e-3c4d-4e5f-9a0b-1c2d3e4f5a6b";

    fn both(text: &str) -> Container {
        parse_cgroup(text)
    }

    #[test]
    fn systemd_driver_containerd_v2() {
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope\n",
            UID.replace('-', "_")
        );
        let c = both(&text);
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.pod_uid.as_deref(), Some(UID));
    }

    #[test]
    fn systemd_driver_guaranteed_and_besteffort_crio() {
        let text = format!(
            "0::/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(both(&text).pod_uid.as_deref(), Some(UID));
        assert_eq!(both(&text).container_id.as_deref(), Some(ID));
        let text = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{ID}.scope/init.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(both(&text).container_id.as_deref(), Some(ID));
        // conmon's scope is not the container.
        let text = format!("0::/kubepods.slice/crio-conmon-{ID}.scope\n");
        assert_eq!(both(&text).container_id, None);
    }

    #[test]
    fn cgroupfs_driver_v1_and_v2() {
        let c = both(&format!("0::/kubepods/burstable/pod{UID}/{ID}\n"));
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.pod_uid.as_deref(), Some(UID));
        let c = both(&format!("0::/kubepods/pod{UID}/{ID}\n"));
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.pod_uid.as_deref(), Some(UID));
        let v1 = format!(
            "12:pids:/kubepods/besteffort/pod{UID}/{ID}\n\
             11:memory:/kubepods/besteffort/pod{UID}/{ID}\n\
             1:name=systemd:/kubepods/besteffort/pod{UID}/{ID}\n\
             0::/\n"
        );
        let c = both(&v1);
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.pod_uid.as_deref(), Some(UID));
    }

    #[test]
    fn docker() {
        let c = both(&format!("0::/docker/{ID}\n"));
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.pod_uid, None);
        let c = both(&format!("0::/system.slice/docker-{ID}.scope\n"));
        assert_eq!(c.container_id.as_deref(), Some(ID));
        let c = both(&format!("13:cpuset:/docker/{ID}\n0::/\n"));
        assert_eq!(c.container_id.as_deref(), Some(ID));
    }

    #[test]
    fn host_processes_and_junk_give_nothing() {
        for text in [
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/system.slice/sshd.service\n",
            "0::/\n",
            "",
            "garbage without colons\n",
            "0::/docker/not-an-id\n",
            "0::/kubepods/burstable/podzzz/xyz\n",
            "0::/podcast.slice/x\n",
        ] {
            assert_eq!(both(text), Container::default(), "{text:?}");
        }
    }

    #[test]
    fn own_process_does_not_fail() {
        let _ = container_of(std::process::id());
        assert_eq!(container_of(u32::MAX - 1), Container::default());
    }
}
