//! Nodes the trace has no handle of, graphs built before the attach or
//! mid-capture, failed calls, bounds, captures under an overhead budget.

use super::*;

/// Two threads: one captures while the other destroys a node of its own
/// clone that the trace has no handle of. The capture's graph cannot hold
/// that node (no call may change a graph while a capture records into
/// it), so it stays known (seen on the simulator: the second thread's
/// capture read back from memory, its copies and memsets lost).
#[test]
fn an_unseen_node_named_during_a_capture_is_not_the_captures() {
    let mut t = T::new();
    t.begin_capture(S);
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf00, 64, S)), Some(1));
    t.g(GraphCall::DestroyNode { node: 0x999 });
    assert_eq!(
        t.captured("cuMemsetD32Async", copy(1024, Direction::Memset, S, true)),
        Some(1)
    );
    t.end_capture(S, 0x6a);
    t.instantiate(0x6a, 0xea);
    let want = vec![named(0xf00, 64), Node::Memset { bytes: 1024 }];
    assert_eq!(t.run(0xea), (Some(want), true));
    assert_eq!(t.env.reads, 0);
    // Once the capture is over, its graph is held like any other: a node
    // named unseen then may be one of its anonymous ones.
    t.begin_capture(S);
    t.captured("cuLaunchKernel", launch(0xf00, 64, S));
    t.end_capture(S, 0x6c);
    t.g(GraphCall::DestroyNode { node: 0x998 });
    t.instantiate(0x6c, 0xec);
    assert_eq!(t.run(0xec).0, None);
}

/// Calls of different threads come out of the ring out of their order: a
/// node named unseen by one thread's call does not change what another
/// thread's instantiation that began before it copied.
#[test]
fn an_unseen_node_taints_instantiations_after_it() {
    let mut t = T::new();
    build_nodes(&mut t);
    t.g(GraphCall::Clone {
        original: 0x6b,
        clone: Some(0x6f),
    });
    t.env.now = 200;
    t.g(GraphCall::DestroyNode { node: 0x999 });
    // Began at 100, drained after the call of 200.
    t.env.now = 100;
    t.instantiate(0x6f, 0xef);
    assert_eq!(t.run(0xef).0.unwrap().len(), 6);
    // Began after it: not known.
    t.env.now = 300;
    t.instantiate(0x6f, 0xf0);
    assert_eq!(t.run(0xf0).0, None);
    assert_eq!(t.env.reads, 1);
}

#[test]
fn clone_and_an_unseen_node() {
    let mut t = T::new();
    build_nodes(&mut t);
    t.g(GraphCall::Clone {
        original: 0x6b,
        clone: Some(0x6f),
    });
    t.g(GraphCall::Instantiate {
        graph: 0x6f,
        exec: Some(0xef),
    });
    assert_eq!(t.run(0xef).0.unwrap().len(), 6, "a clone runs the same");
    t.g(GraphCall::Create { graph: Some(0x70) });
    t.add(0x70, 0x700, kernel(0xf00, 1));
    // A node of the clone, which the trace has no handle of, destroyed.
    t.g(GraphCall::DestroyNode { node: 0x999 });
    t.g(GraphCall::Instantiate {
        graph: 0x6f,
        exec: Some(0xf0),
    });
    t.env.memory.insert(0xf0, vec![named(0xf00, 1)]);
    let (nodes, said) = t.run(0xf0);
    assert!(said);
    assert_eq!(nodes, Some(vec![named(0xf00, 1)]));
    assert_eq!(t.env.reads, 1);
    // That node may be in the copy of a child graph too (the driver hands
    // it out with cuGraphChildGraphNodeGetGraph)...
    t.g(GraphCall::Instantiate {
        graph: 0x6b,
        exec: Some(0xf1),
    });
    assert_eq!(t.run(0xf1).0, None);
    // ...but not in a graph whose every node the trace saw made.
    t.g(GraphCall::Instantiate {
        graph: 0x70,
        exec: Some(0xf2),
    });
    assert_eq!(t.run(0xf2).0, Some(vec![named(0xf00, 1)]));
    assert_eq!(t.env.reads, 2);
}

/// Attached after instantiation, as with a JAX program: read from memory,
/// read again only when a setter changes something.
#[test]
fn built_before_attach() {
    let mut t = T::new();
    t.env
        .memory
        .insert(0xe1, vec![named(0xf00, 1), named(0xf01, 2)]);
    let (nodes, said) = t.run(0xe1);
    assert!(said);
    assert_eq!(nodes.unwrap().len(), 2);
    assert!(!t.run(0xe1).1);
    assert_eq!(t.env.reads, 1);
    for _ in 0..3 {
        for n in [0xa0, 0xa1] {
            t.g(GraphCall::ExecSetNode {
                exec: 0xe1,
                node: n,
                spec: kernel(0xf00 + (n & 1), 2),
            });
        }
        t.run(0xe1);
    }
    assert_eq!(t.env.reads, 2, "read again once, after the first setters");
    t.env.memory.insert(0xe1, vec![named(0xf02, 9)]);
    t.g(GraphCall::ExecSetNode {
        exec: 0xe1,
        node: 0xa0,
        spec: kernel(0xf02, 9),
    });
    assert_eq!(t.run(0xe1), (Some(vec![named(0xf02, 9)]), true));
    assert_eq!(t.env.reads, 3);
}

#[test]
fn opaque_said_once() {
    let mut t = T::new();
    assert_eq!(t.run(0xe9), (None, true));
    assert_eq!(t.run(0xe9), (None, false));
    assert_eq!(t.book.take_notes(), vec![GraphNote::Opaque { exec: 0xe9 }]);
    assert!(t.book.take_notes().is_empty());
}

#[test]
fn attached_mid_capture() {
    let mut t = T::new();
    // The capture began before the trace: a launch looks like it ran...
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf00, 1, S)), None);
    // ...until the driver says the stream is capturing.
    t.g(GraphCall::CaptureStatus {
        stream: S,
        status: Some(1),
        id: Some(7),
    });
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf00, 1, S)), Some(1));
    t.g(GraphCall::EndCapture {
        stream: S,
        graph: Some(0x60),
    });
    t.g(GraphCall::Instantiate {
        graph: 0x60,
        exec: Some(0xe0),
    });
    assert_eq!(t.run(0xe0).0, None, "what it recorded first is not known");
    // A capture that ends without the trace having seen it at all.
    t.g(GraphCall::EndCapture {
        stream: S2,
        graph: Some(0x61),
    });
    let notes = t.book.take_notes();
    assert!(notes.contains(&GraphNote::MidCapture { stream: S }));
    assert!(notes.contains(&GraphNote::MidCapture { stream: S2 }));
}

#[test]
fn failed_calls_change_nothing() {
    let mut t = T::new();
    t.failed(
        GraphCall::BeginCapture {
            stream: S,
            mode: Some(0),
            graph: None,
        },
        900,
    );
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf00, 1, S)), None);
    t.g(GraphCall::BeginCapture {
        stream: S,
        mode: Some(0),
        graph: None,
    });
    // Ended from the wrong thread: the capture goes on.
    t.failed(
        GraphCall::EndCapture {
            stream: S,
            graph: None,
        },
        908,
    );
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf00, 1, S)), Some(1));
    // Invalidated: it is over.
    t.failed(
        GraphCall::EndCapture {
            stream: S,
            graph: None,
        },
        901,
    );
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf00, 1, S)), None);
    assert_eq!(t.book.held().0, 0, "its graph was dropped");
    let mut failed_launch = launch(0xf00, 1, S);
    t.book
        .observe("cuLaunchKernel", &mut failed_launch, Some(1), &mut t.env);
}

#[test]
fn bounded() {
    let mut t = T::new();
    for g in 0..MAX_GRAPHS as u64 + 10 {
        t.g(GraphCall::Create {
            graph: Some(0x10_0000 + g),
        });
    }
    assert_eq!(t.book.held().0, MAX_GRAPHS);
    assert_eq!(t.book.overflowed, 10);
    // A graph not held reads as unknown: its exec is read from memory.
    let last = 0x10_0000 + MAX_GRAPHS as u64 + 5;
    t.add(last, 0x1, kernel(0xf00, 1));
    t.g(GraphCall::Instantiate {
        graph: last,
        exec: Some(0xe5),
    });
    assert_eq!(t.run(0xe5).0, None);
    assert_eq!(t.env.reads, 1);
    for g in 0..MAX_GRAPHS as u64 + 10 {
        t.g(GraphCall::Destroy {
            graph: 0x10_0000 + g,
        });
    }
    assert_eq!(t.book.held().0, 0);
}

/// XLA edits a child graph through the handle the node hands out, then
/// swaps it into the executable graph.
#[test]
fn child_graph_edited_through_its_node() {
    let mut t = T::new();
    build_nodes(&mut t);
    t.g(GraphCall::ChildGraph {
        node: 0xb4,
        graph: Some(0x6c4),
    });
    t.add(0x6c4, 0xc9, kernel(0xf01, 6));
    t.g(GraphCall::ExecSetNode {
        exec: 0xeb,
        node: 0xb4,
        spec: Node::Child {
            graph: 0x6c4,
            moved: false,
        },
    });
    let nodes = t.run(0xeb).0.unwrap();
    assert_eq!(
        nodes[3..6],
        [named(0xf02, 4), named(0xf02, 2), named(0xf01, 6)]
    );
    // The node's own graph: destroying the parent frees it.
    t.g(GraphCall::Destroy { graph: 0x6b });
    assert_eq!(t.book.held().0, 0);
}

#[test]
fn nodes_found_in_a_clone() {
    let mut t = T::new();
    t.g(GraphCall::Create { graph: Some(0x70) });
    t.add(0x70, 0x700, kernel(0xf00, 1));
    t.add(0x70, 0x701, kernel(0xf01, 2));
    t.g(GraphCall::Clone {
        original: 0x70,
        clone: Some(0x71),
    });
    t.g(GraphCall::FindInClone {
        original: 0x701,
        clone: 0x71,
        node: Some(0x711),
    });
    t.g(GraphCall::DestroyNode { node: 0x711 });
    t.g(GraphCall::Instantiate {
        graph: 0x71,
        exec: Some(0xe1),
    });
    assert_eq!(t.run(0xe1).0, Some(vec![named(0xf00, 1)]));
    t.g(GraphCall::Instantiate {
        graph: 0x70,
        exec: Some(0xe0),
    });
    assert_eq!(t.run(0xe0).0.unwrap().len(), 2);
    assert_eq!(t.env.reads, 0);
}

/// A capture made while an overhead budget had the launch probes off for a
/// while recorded work the trace never saw: its executable graph is read
/// from memory, and the user told once. One made while they were on
/// throughout is followed from its calls.
#[test]
fn a_capture_made_while_the_busy_probes_were_off_is_read_from_memory() {
    let mut t = T::new();
    t.env.off = vec![(150, 160)];
    t.env
        .memory
        .insert(0xea, vec![named(0xf00, 64), named(0xf01, 8)]);
    t.env.now = 100;
    t.begin_capture(S);
    t.captured("cuLaunchKernel", launch(0xf00, 64, S));
    // 0xf01 launched at 155, unseen.
    t.env.now = 200;
    t.end_capture(S, 0x6a);
    assert_eq!(
        t.book.take_notes(),
        vec![GraphNote::SampledCapture { graph: 0x6a }]
    );
    t.instantiate(0x6a, 0xea);
    assert_eq!(t.run(0xea).0, Some(vec![named(0xf00, 64), named(0xf01, 8)]));
    assert_eq!(t.env.reads, 1);
    // On throughout: followed.
    t.env.now = 300;
    t.begin_capture(S);
    t.captured("cuLaunchKernel", launch(0xf02, 16, S));
    t.env.now = 400;
    t.end_capture(S, 0x6b);
    assert!(t.book.take_notes().is_empty());
    t.instantiate(0x6b, 0xeb);
    assert_eq!(t.run(0xeb).0, Some(vec![named(0xf02, 16)]));
    assert_eq!(t.env.reads, 1);
}
