//! Calls and host time by call site, per API: the "Top call sites" of the
//! summary and of `top`. A call site is the innermost user frame of a
//! call's stack, Python first ([`crate::stacks::table::call_site`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::model::capped::Overflow;
use crate::stacks::table::call_site;

/// Distinct call sites kept per API; calls from sites beyond are counted
/// under [`OTHER_SITES`] (a program calling from ever new places, such as
/// code generated at run time, must not grow the summary without bound).
pub(crate) const MAX_SITES_PER_API: usize = 1000;
/// Where calls from sites past the bound are counted.
pub(crate) const OTHER_SITES: &str = "(other call sites)";
/// The site of a stack with no user frame (every frame in NVIDIA's
/// libraries, or the unwind stopped inside them).
pub(crate) const UNKNOWN_SITE: &str = "(no user frame)";

/// One call site's calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteStats {
    pub calls: u64,
    /// Host time of the calls that have one (`:args` calls have none).
    pub host_ns: u64,
}

/// Call sites of every API.
#[derive(Clone, Debug, Default)]
pub struct CallSites {
    by_api: HashMap<Arc<str>, HashMap<Arc<str>, SiteStats>>,
    /// Per API, the distinct sites counted under [`OTHER_SITES`].
    over: HashMap<Arc<str>, Overflow>,
}

impl CallSites {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.by_api.is_empty()
    }

    /// Counts one call of `api` whose stack has these frames.
    pub fn add<S: AsRef<str>>(&mut self, api: &str, frames: &[S], dur_ns: Option<u64>) {
        let site = call_site(frames).unwrap_or(UNKNOWN_SITE);
        self.add_site(api, site, 1, dur_ns.unwrap_or(0));
    }

    fn add_site(&mut self, api: &str, site: &str, calls: u64, host_ns: u64) {
        if !self.by_api.contains_key(api) {
            self.by_api.insert(Arc::from(api), HashMap::new());
        }
        let room = self.by_api.get(api).is_some_and(|s| {
            let kept = s.len() - usize::from(s.contains_key(OTHER_SITES));
            s.contains_key(site) || kept < MAX_SITES_PER_API
        });
        // The row of sites past the bound is always there to add to (a
        // process's, merged into the total).
        let site = if room || site == OTHER_SITES {
            site
        } else {
            match self.over.get_mut(api) {
                Some(o) => o.add_n(site, calls),
                None => self
                    .over
                    .entry(Arc::from(api))
                    .or_default()
                    .add_n(site, calls),
            }
            OTHER_SITES
        };
        let Some(sites) = self.by_api.get_mut(api) else {
            return;
        };
        let s = match sites.get_mut(site) {
            Some(s) => s,
            None => sites.entry(Arc::from(site)).or_default(),
        };
        s.calls += calls;
        s.host_ns += host_ns;
    }

    /// Adds another set (a process's into the total).
    pub fn merge(&mut self, other: &CallSites) {
        for (api, sites) in &other.by_api {
            for (site, s) in sites {
                self.add_site(api, site, s.calls, s.host_ns);
            }
        }
        for (api, o) in &other.over {
            self.over.entry(api.clone()).or_default().merge(o);
        }
    }

    /// How a site is shown: the row of sites past the bound says how many.
    fn shown(&self, api: &str, site: &str) -> String {
        match self.over.get(api) {
            Some(o) if site == OTHER_SITES => format!("({} other call sites)", o.keys_text()),
            _ => site.to_string(),
        }
    }

    /// APIs with call sites, by host time then calls (most first).
    pub fn apis(&self) -> Vec<(&str, SiteStats)> {
        let mut v: Vec<(&str, SiteStats)> = self
            .by_api
            .iter()
            .map(|(api, sites)| {
                let total = sites.values().fold(SiteStats::default(), |a, s| SiteStats {
                    calls: a.calls + s.calls,
                    host_ns: a.host_ns + s.host_ns,
                });
                (&**api, total)
            })
            .collect();
        v.sort_by(|a, b| (b.1.host_ns, b.1.calls, a.0).cmp(&(a.1.host_ns, a.1.calls, b.0)));
        v
    }

    /// The `n` sites of `api` with the most host time (then calls).
    pub fn top(&self, api: &str, n: usize) -> Vec<(&str, SiteStats)> {
        let Some(sites) = self.by_api.get(api) else {
            return Vec::new();
        };
        let mut v: Vec<(&str, SiteStats)> = sites.iter().map(|(k, s)| (&**k, *s)).collect();
        v.sort_by(|a, b| (b.1.host_ns, b.1.calls, a.0).cmp(&(a.1.host_ns, a.1.calls, b.0)));
        v.truncate(n);
        v
    }

    /// The text section: for the `apis` APIs with the most host time, their
    /// `per_api` top sites. `fmt_ns` formats a duration.
    pub fn render_text(
        &self,
        out: &mut String,
        apis: usize,
        per_api: usize,
        fmt_ns: fn(f64) -> String,
    ) {
        if self.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nTop call sites (innermost user frame, Python first; calls with a stack):"
        );
        let _ = writeln!(
            out,
            " {:>9}  {:>10}  {:>8}  Call site",
            "Calls", "Host Time", "Time (%)"
        );
        let _ = writeln!(out, " {:->9}  {:->10}  {:->8}  {:->9}", "", "", "", "");
        for (api, total) in self.apis().into_iter().take(apis) {
            let _ = writeln!(
                out,
                " {:>9}  {:>10}  {:>8}  {api}",
                total.calls,
                fmt_ns(total.host_ns as f64),
                ""
            );
            for (site, s) in self.top(api, per_api) {
                let site = self.shown(api, site);
                let pct = if total.host_ns > 0 {
                    format!("{:.1}", s.host_ns as f64 * 100.0 / total.host_ns as f64)
                } else {
                    "-".into()
                };
                let _ = writeln!(
                    out,
                    " {:>9}  {:>10}  {:>8}    {site}",
                    s.calls,
                    fmt_ns(s.host_ns as f64),
                    pct
                );
            }
        }
    }

    /// `{"API": [{"site": .., "calls": .., "host_ns": ..}, ..], ..}` with the
    /// `per_api` top sites of every API.
    pub fn to_json(&self, per_api: usize) -> Value {
        let mut m = serde_json::Map::new();
        for (api, _) in self.apis() {
            let sites: Vec<Value> = self
                .top(api, per_api)
                .into_iter()
                .map(|(site, s)| {
                    let mut v = json!({"site": site, "calls": s.calls, "host_ns": s.host_ns});
                    match self.over.get(api) {
                        Some(o) if site == OTHER_SITES => v["sites"] = Value::from(o.keys()),
                        _ => {}
                    }
                    v
                })
                .collect();
            m.insert(api.to_string(), Value::Array(sites));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(v: f64) -> String {
        format!("{v:.0} ns")
    }

    #[test]
    fn sites_by_host_time_python_first() {
        let mut c = CallSites::new();
        let item = [
            "cuStreamSynchronize (libcuda.so.1)",
            "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
            "train (/w/t.py:42)",
            "main (/w/t.py:50)",
        ];
        let other = ["cuStreamSynchronize (libcuda.so.1)", "eval (/w/t.py:60)"];
        for _ in 0..3 {
            c.add("cuStreamSynchronize", &item, Some(100));
        }
        c.add("cuStreamSynchronize", &other, Some(50));
        c.add("cuLaunchKernel", &["cuLaunchKernel (libcuda.so.1)"], None);
        assert_eq!(
            c.top("cuStreamSynchronize", 5),
            [
                (
                    "train (/w/t.py:42)",
                    SiteStats {
                        calls: 3,
                        host_ns: 300
                    }
                ),
                (
                    "eval (/w/t.py:60)",
                    SiteStats {
                        calls: 1,
                        host_ns: 50
                    }
                ),
            ]
        );
        assert_eq!(
            c.top("cuLaunchKernel", 5),
            [(
                UNKNOWN_SITE,
                SiteStats {
                    calls: 1,
                    host_ns: 0
                }
            )]
        );
        assert_eq!(c.apis()[0].0, "cuStreamSynchronize");
        let mut text = String::new();
        c.render_text(&mut text, 10, 5, ns);
        assert!(text.contains("Top call sites"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[4].ends_with("cuStreamSynchronize"), "{text}");
        assert!(
            lines[5].contains("300 ns") && lines[5].contains("85.7"),
            "{text}"
        );
        assert!(lines[5].ends_with("train (/w/t.py:42)"), "{text}");
        let j = c.to_json(5);
        assert_eq!(j["cuStreamSynchronize"][0]["site"], "train (/w/t.py:42)");
        assert_eq!(j["cuStreamSynchronize"][0]["calls"], 3);
        assert_eq!(j["cuLaunchKernel"][0]["host_ns"], 0);
    }

    #[test]
    fn sites_are_bounded_and_merge() {
        let mut c = CallSites::new();
        for i in 0..MAX_SITES_PER_API + 10 {
            let f = format!("f{i} (/g.py:{i})");
            c.add("cuLaunchKernel", &[f.as_str()], Some(1));
        }
        let top = c.top("cuLaunchKernel", MAX_SITES_PER_API + 10);
        assert_eq!(top.len(), MAX_SITES_PER_API + 1);
        assert!(top.contains(&(
            OTHER_SITES,
            SiteStats {
                calls: 10,
                host_ns: 10
            }
        )));
        assert_eq!(c.over["cuLaunchKernel"].keys(), 10);
        let mut text = String::new();
        c.render_text(&mut text, 1, MAX_SITES_PER_API + 1, |v| format!("{v}"));
        assert!(text.contains("(10 other call sites)"), "not said");
        let j = c.to_json(MAX_SITES_PER_API + 1);
        let other = j["cuLaunchKernel"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["site"] == OTHER_SITES)
            .unwrap();
        assert_eq!(other["sites"], 10);
        let mut total = CallSites::new();
        total.merge(&c);
        total.merge(&c);
        assert_eq!(total.over["cuLaunchKernel"].keys(), 10);
        assert_eq!(
            total.apis()[0].1,
            SiteStats {
                calls: 2 * (MAX_SITES_PER_API as u64 + 10),
                host_ns: 2 * (MAX_SITES_PER_API as u64 + 10),
            }
        );
    }
}
