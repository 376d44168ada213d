//! A traced process began a new program (`execve`), as the exec tracepoint
//! says in the ring buffer, in order with the calls: what was known of the
//! old program is dropped and its calls from here on carry the new name.

use std::sync::Arc;

use tracer_common::ExecEvent;

use crate::decode::enrich::Enricher;
use crate::host::clock::Clock;
use crate::model::sink::Sink;
use crate::model::Event;
use crate::model::Exec;
use crate::session::stacks::SessionStacks;

/// Handles an exec record: for a process the session traces, starts its
/// state again under the new name and, when calls of the old program were
/// seen, says [`Event::Exec`] to `sink` (a command started with `-- CMD` is
/// a copy of gputrace until its exec: nothing to say). Any other exec on
/// the host is none of its business.
pub(super) fn exec<S: Sink + ?Sized>(
    enricher: &mut Enricher,
    stacks: Option<&mut SessionStacks>,
    clock: Clock,
    x: &ExecEvent,
    sink: &mut S,
) {
    let Some((old_comm, called)) = enricher.comm(x.pid) else {
        return;
    };
    let end = x.comm.iter().position(|b| *b == 0).unwrap_or(x.comm.len());
    let name = String::from_utf8_lossy(&x.comm[..end]);
    let comm: Arc<str> = Arc::from(crate::text::printable(&name));
    // Kernel names, allocations, graphs, communicators, stub symbols: all
    // of the old program's.
    enricher.forget(x.pid);
    enricher.add(x.pid, comm.clone());
    if let Some(s) = stacks {
        // Its mappings are new.
        s.execed(x.pid);
    }
    if called {
        sink.take(Event::Exec(Exec {
            pid: x.pid,
            ts_ns: clock.to_unix_ns(x.ts_ns),
            old_comm,
            comm,
        }));
    }
}
