//! One operator request (a drain, a resume, a cancel of every run) sent to
//! several replicas, and their answers gathered into one: the operator
//! asked the deployment, so the deployment answers once, when every
//! replica has.

use tokio::sync::oneshot;

use crate::deployment::Waiter;

/// Waiters for `n` replicas whose answers, once all are in, answer `to`:
/// every replica's text, one line each, or the first refusal with the
/// others' answers after it.
pub fn fan_out(to: Waiter, n: usize) -> Vec<Waiter> {
    match to {
        Waiter::Said(tx) => {
            let (parts, rxs) = channels::<String>(n);
            tokio::spawn(async move {
                let answers = collect(rxs).await;
                let _ = tx.send(combine(answers, |text| text));
            });
            parts.into_iter().map(Waiter::Said).collect()
        }
        Waiter::Journaled(tx) => {
            let (parts, rxs) = channels::<u64>(n);
            tokio::spawn(async move {
                let answers = collect(rxs).await;
                let last = answers
                    .iter()
                    .filter_map(|a| a.as_ref().ok())
                    .max()
                    .copied();
                let _ =
                    tx.send(combine(answers, |seq| seq.to_string()).and_then(|_| {
                        last.ok_or_else(|| "no replica committed a cancel".to_owned())
                    }));
            });
            parts.into_iter().map(Waiter::Journaled).collect()
        }
        // Recycles are the crew's, answered with every new pid.
        other => {
            other.fail("this request cannot be split between replicas".into());
            Vec::new()
        }
    }
}

type Answer<T> = Result<T, String>;

type Parts<T> = (
    Vec<oneshot::Sender<Answer<T>>>,
    Vec<oneshot::Receiver<Answer<T>>>,
);

fn channels<T>(n: usize) -> Parts<T> {
    (0..n).map(|_| oneshot::channel()).unzip()
}

async fn collect<T>(rxs: Vec<oneshot::Receiver<Answer<T>>>) -> Vec<Answer<T>> {
    let mut answers = Vec::with_capacity(rxs.len());
    for rx in rxs {
        answers.push(
            rx.await
                .unwrap_or_else(|_| Err("the replica ended before answering".into())),
        );
    }
    answers
}

/// One line per answer; an error if any replica refused.
fn combine<T>(answers: Vec<Answer<T>>, show: impl Fn(T) -> String) -> Answer<String> {
    let refused = answers.iter().any(Result::is_err);
    let lines: Vec<String> = answers
        .into_iter()
        .map(|a| match a {
            Ok(v) => show(v),
            Err(e) => e,
        })
        .collect();
    let text = lines.join("\n");
    if refused { Err(text) } else { Ok(text) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_are_gathered_once_every_replica_has_answered() {
        let (tx, rx) = oneshot::channel();
        let parts = fan_out(Waiter::Said(tx), 2);
        let mut parts = parts.into_iter();
        let (Some(Waiter::Said(a)), Some(Waiter::Said(b))) = (parts.next(), parts.next()) else {
            panic!("two Said parts");
        };
        let _ = b.send(Ok("orders/2 drained".into()));
        let _ = a.send(Ok("orders/1 drained".into()));
        assert_eq!(
            rx.await.unwrap(),
            Ok("orders/1 drained\norders/2 drained".to_owned())
        );
    }

    #[tokio::test]
    async fn one_refusal_refuses_and_a_gone_replica_is_named() {
        let (tx, rx) = oneshot::channel();
        let mut parts = fan_out(Waiter::Journaled(tx), 2).into_iter();
        let (Some(Waiter::Journaled(a)), Some(Waiter::Journaled(b))) = (parts.next(), parts.next())
        else {
            panic!("two Journaled parts");
        };
        let _ = a.send(Ok(7));
        drop(b);
        assert_eq!(
            rx.await.unwrap(),
            Err("7\nthe replica ended before answering".to_owned())
        );
    }
}
