//! The Kubernetes manifest in deploy/ has the shape a node tracer needs and
//! agrees with itself (labels, port, arguments). No cluster needed.

use std::path::PathBuf;

use serde::Deserialize;
use serde_norway::Value;

fn manifest() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/daemonset.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn get<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| {
        v.get(*k)
            .unwrap_or_else(|| panic!("missing {k} (in {})", path.join(".")))
    })
}

fn str_of<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{} is not a string", path.join(".")))
}

#[test]
fn daemonset_is_privileged_host_pid_and_consistent() {
    let docs = manifest();
    let ds = docs
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("DaemonSet"))
        .expect("a DaemonSet in deploy/daemonset.yaml");
    assert_eq!(str_of(ds, &["apiVersion"]), "apps/v1");
    let ns = str_of(ds, &["metadata", "namespace"]);
    // The namespace it goes to is created by the same file.
    assert!(docs.iter().any(|d| {
        d.get("kind").and_then(Value::as_str) == Some("Namespace")
            && d["metadata"]["name"].as_str() == Some(ns)
    }));

    // The selector picks the pods of the template.
    let selector = get(ds, &["spec", "selector", "matchLabels"])
        .as_mapping()
        .expect("matchLabels is a map");
    let labels = get(ds, &["spec", "template", "metadata", "labels"])
        .as_mapping()
        .expect("template labels are a map");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(labels.get(k), Some(v), "template label {k:?}");
    }

    let pod = get(ds, &["spec", "template", "spec"]);
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    let containers = pod["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["securityContext"]["privileged"].as_bool(), Some(true));

    let args: Vec<&str> = c["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string args"))
        .collect();
    assert_eq!(args.first(), Some(&"daemon"), "{args:?}");
    let listen = args
        .iter()
        .position(|a| *a == "--listen")
        .map(|i| args[i + 1])
        .expect("--listen ADDR");
    let listen_port: u16 = listen.rsplit(':').next().unwrap().parse().unwrap();
    // Reachable from Prometheus on the pod's address, not only loopback.
    assert!(listen.starts_with("0.0.0.0:"), "{listen}");

    // The scrape annotations name the port the daemon listens on.
    let ann = get(ds, &["spec", "template", "metadata", "annotations"]);
    assert_eq!(ann["prometheus.io/scrape"].as_str(), Some("true"));
    let scrape_port: u16 = ann["prometheus.io/port"]
        .as_str()
        .expect("prometheus.io/port is a quoted string")
        .parse()
        .unwrap();
    assert_eq!(scrape_port, listen_port);
    assert_eq!(ann["prometheus.io/path"].as_str(), Some("/metrics"));
    let ports = c["ports"].as_sequence().expect("ports");
    assert!(ports
        .iter()
        .any(|p| p["containerPort"].as_u64() == Some(u64::from(listen_port))));

    // The calibration cache survives restarts on the node.
    let mount = c["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"].as_str() == Some("/var/cache/gputrace"))
        .expect("/var/cache/gputrace mounted");
    let vol = pod["volumes"]
        .as_sequence()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the cache's volume");
    assert_eq!(
        vol["hostPath"]["path"].as_str(),
        Some("/var/cache/gputrace")
    );
    // In a directory of its own under the mount: the kubelet makes the
    // hostPath 0755, and gputrace keeps its cache only in a 0700 directory.
    let cache_dir = c["env"]
        .as_sequence()
        .expect("env")
        .iter()
        .find(|e| e["name"].as_str() == Some("GPUTRACE_CACHE_DIR"))
        .and_then(|e| e["value"].as_str())
        .expect("GPUTRACE_CACHE_DIR set");
    assert!(cache_dir.starts_with("/var/cache/gputrace/"), "{cache_dir}");

    // Resources are stated; memory is capped.
    assert!(c["resources"]["requests"]["memory"].as_str().is_some());
    assert!(c["resources"]["limits"]["memory"].as_str().is_some());
    // Probes use the daemon's health endpoint.
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
}

/// Names like `gputrace_nccl_last_seq` or `gputrace:nccl_seq_behind` in a text.
fn metric_names(text: &str, prefix: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        rest = &rest[i + name.len().max(1)..];
        // `gputrace: NCCL across ranks` (a title) names nothing.
        if name.len() > prefix.len() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn nccl_rules_and_dashboard_use_what_is_served_and_recorded() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let read =
        |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let rules = read("deploy/prometheus/gputrace-nccl.rules.yml");
    let dashboard = read("deploy/grafana/gputrace-nccl.json");
    let docs = read("docs/metrics.md");
    let served = read("tracer/src/outputs/metrics/nccl.rs");
    // The dashboard is JSON with panels.
    let d: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard JSON");
    assert!(d["panels"].as_array().is_some_and(|p| !p.is_empty()));
    // Every recorded series they use is recorded by the rules.
    let recorded: std::collections::BTreeSet<String> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .map(str::to_string)
        .collect();
    assert!(!recorded.is_empty());
    for name in metric_names(&rules, "gputrace:").union(&metric_names(&dashboard, "gputrace:")) {
        assert!(recorded.contains(name), "{name} is used but not recorded");
    }
    // Every raw series they use is served by the daemon and documented.
    for name in
        metric_names(&rules, "gputrace_nccl_").union(&metric_names(&dashboard, "gputrace_nccl_"))
    {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            served.contains(&format!("\"{family}\"")),
            "{family} is not served"
        );
        assert!(
            docs.contains(&format!("`{family}`")),
            "{family} is not in docs/metrics.md"
        );
    }
}
