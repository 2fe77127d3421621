//! The crew's decisions, step by step.

use super::*;

fn names(out: &[Action<u32>]) -> String {
    out.iter()
        .map(|a| match a {
            Action::Add { index } => format!("add {index}"),
            Action::Recycle { index, .. } => format!("recycle {index}"),
            Action::Retire { index } => format!("retire {index}"),
            Action::Replaced { old, new, .. } => format!("{new} replaces {old}"),
            Action::Answer { to, answer } => match answer {
                Ok(pids) => format!("ok:{to} {pids:?}"),
                Err(e) => format!("err:{to} {e}"),
            },
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn recycle_all(crew: &mut Crew<u32>, waiter: u32) -> String {
    names(&crew.on(Input::Recycle {
        which: Which::All,
        cause: RecycleCause::Operator,
        reason: "deploy".into(),
        waiter: Some(waiter),
    }))
}

#[test]
fn a_crew_starts_its_replicas() {
    let (crew, out) = Crew::<u32>::new(3, false);
    assert_eq!(names(&out), "add 1, add 2, add 3");
    assert_eq!(crew.slots().len(), 3);
    let (_, out) = Crew::<u32>::new(0, false);
    assert_eq!(names(&out), "add 1", "at least one");
}

#[test]
fn without_overlap_a_roll_recycles_one_slot_at_a_time_in_place() {
    let (mut crew, _) = Crew::<u32>::new(3, false);
    assert_eq!(recycle_all(&mut crew, 7), "recycle 1");
    // A second recycle joins the roll under way.
    assert_eq!(recycle_all(&mut crew, 8), "");
    assert_eq!(
        names(&crew.on(Input::Recycled { index: 2, pid: 5 })),
        "",
        "not its turn"
    );
    assert_eq!(
        names(&crew.on(Input::Recycled { index: 1, pid: 11 })),
        "recycle 2"
    );
    assert_eq!(
        names(&crew.on(Input::Recycled { index: 2, pid: 12 })),
        "recycle 3"
    );
    assert_eq!(
        names(&crew.on(Input::Recycled { index: 3, pid: 13 })),
        "ok:7 [11, 12, 13], ok:8 [11, 12, 13]"
    );
}

#[test]
fn with_overlap_a_successor_is_ready_before_the_old_slot_retires() {
    let (mut crew, _) = Crew::<u32>::new(2, true);
    assert_eq!(recycle_all(&mut crew, 7), "add 3");
    assert_eq!(crew.slots().len(), 3, "one extra child at most");
    assert_eq!(
        names(&crew.on(Input::Ready { index: 3, pid: 30 })),
        "3 replaces 1, retire 1"
    );
    // The next step waits until the old slot has ended: still one extra.
    assert_eq!(names(&crew.on(Input::Ready { index: 2, pid: 99 })), "");
    assert_eq!(names(&crew.on(Input::Ended { index: 1 })), "add 4");
    assert_eq!(
        names(&crew.on(Input::Ready { index: 4, pid: 40 })),
        "4 replaces 2, retire 2"
    );
    assert_eq!(names(&crew.on(Input::Ended { index: 2 })), "ok:7 [30, 40]");
    let left: Vec<u32> = crew.slots().iter().map(|s| s.index).collect();
    assert_eq!(left, [3, 4]);
}

#[test]
fn a_successor_that_never_becomes_ready_is_retired_and_the_roll_refused() {
    let (mut crew, _) = Crew::<u32>::new(1, true);
    assert_eq!(recycle_all(&mut crew, 7), "add 2");
    assert_eq!(
        names(&crew.on(Input::Refused {
            index: 2,
            why: "not recycled: the new child (pid 5) of svc never became ready".into(),
        })),
        "retire 2, err:7 not recycled: the new child (pid 5) of svc never became ready"
    );
    assert_eq!(names(&crew.on(Input::Ended { index: 2 })), "");
    let left: Vec<u32> = crew.slots().iter().map(|s| s.index).collect();
    assert_eq!(left, [1], "the old child keeps serving");
}

#[test]
fn an_in_place_refusal_refuses_the_roll() {
    let (mut crew, _) = Crew::<u32>::new(2, false);
    recycle_all(&mut crew, 7);
    assert_eq!(
        names(&crew.on(Input::Refused {
            index: 1,
            why: "not recycled: command gone".into()
        })),
        "err:7 not recycled: command gone"
    );
    // The next recycle starts afresh.
    assert_eq!(recycle_all(&mut crew, 8), "recycle 1");
}

#[test]
fn one_slot_can_be_recycled_and_an_unknown_one_is_refused() {
    let (mut crew, _) = Crew::<u32>::new(3, false);
    let out = crew.on(Input::Recycle {
        which: Which::One(2),
        cause: RecycleCause::Operator,
        reason: "just two".into(),
        waiter: Some(1),
    });
    assert_eq!(names(&out), "recycle 2");
    assert_eq!(
        names(&crew.on(Input::Recycled { index: 2, pid: 22 })),
        "ok:1 [22]"
    );
    let out = crew.on(Input::Recycle {
        which: Which::One(9),
        cause: RecycleCause::Operator,
        reason: "nine".into(),
        waiter: Some(2),
    });
    assert_eq!(names(&out), "err:2 no replica 9; the replicas are 1, 2, 3");
}

#[test]
fn scaling_adds_slots_or_retires_the_newest() {
    let (mut crew, _) = Crew::<u32>::new(3, false);
    assert_eq!(names(&crew.reconfigure(1, false)), "retire 3, retire 2");
    crew.on(Input::Ended { index: 3 });
    crew.on(Input::Ended { index: 2 });
    assert_eq!(names(&crew.reconfigure(2, false)), "add 4");
    assert_eq!(names(&crew.reconfigure(2, true)), "", "nothing to change");
}

#[test]
fn a_stop_answers_the_roll_and_adds_nothing() {
    let (mut crew, _) = Crew::<u32>::new(1, true);
    recycle_all(&mut crew, 7);
    assert_eq!(
        names(&crew.stop()),
        "err:7 not recycled: the supervisor is stopping"
    );
    assert_eq!(names(&crew.reconfigure(3, true)), "");
    assert_eq!(recycle_all(&mut crew, 8), "");
}
