//! `/journal`: the signed journal's head (the value to save and give
//! `wfhost journal verify --expect-head` later), its newest records, and,
//! asked for, a verification of every record from the first, as `wfhost
//! journal verify` does (read on the store's read connection).

use ed25519_dalek::VerifyingKey;

use super::super::html::{self, esc};
use super::Seen;
use crate::console::http::Response;
use crate::journal::Verifier;
use crate::store::guard::PAGE;

/// Newest records shown.
const SHOWN: u64 = 50;

/// The page.
pub async fn page(seen: &Seen<'_>) -> Response {
    let shared = &seen.ctx.shared;
    let mut main = String::new();
    let heads = shared.reader.call(|s| s.journal_heads()).await;
    let head = match heads {
        Ok(Ok(h)) => h.head,
        Ok(Err(e)) => return seen.page("Journal", &html::refusal(&e.to_string())).await,
        Err(e) => return seen.page("Journal", &html::refusal(&e.to_string())).await,
    };
    main.push_str(&format!(
        "<p>Head: <code id=\"head\">{}</code> (seq {}). Save it, and check later that the journal still holds it unchanged: \
         <code>wfhost journal verify --config CONFIG --expect-head {}</code></p>",
        esc(&head.to_string()),
        head.seq,
        esc(&head.to_string())
    ));
    if seen.query("verify").is_some() {
        let keys: Vec<VerifyingKey> = match &shared.fleet {
            Some(f) => crate::fleet::open::all_keys(f, &shared.key).await,
            None => vec![shared.key.verifying_key()],
        };
        let verdict = shared
            .reader
            .call(move |s| {
                let mut verifier = Verifier::from_genesis(&keys);
                let mut after = 0;
                loop {
                    let page = s.journal_after(after, PAGE).map_err(|e| e.to_string())?;
                    for record in &page {
                        verifier.check(record).map_err(|b| b.to_string())?;
                        after = record.seq;
                    }
                    if page.len() < PAGE {
                        break;
                    }
                }
                let heads = s.journal_heads().map_err(|e| e.to_string())?;
                verifier.finish(&heads.head).map_err(|b| b.to_string())
            })
            .await;
        match verdict {
            Ok(Ok(n)) => main.push_str(&format!(
                "<p class=\"ok\" id=\"verdict\">verified: {n} records, every signature and the hash chain</p>"
            )),
            Ok(Err(e)) => main.push_str(&html::refusal(&format!("the journal is broken: {e}"))),
            Err(e) => main.push_str(&html::refusal(&e.to_string())),
        }
    } else {
        main.push_str("<form method=\"get\" action=\"/journal\"><input type=\"hidden\" name=\"verify\" value=\"1\"><button type=\"submit\">Verify every record</button></form>");
    }
    let after = head.seq.saturating_sub(SHOWN);
    let records = shared
        .reader
        .call(move |s| s.journal_after(after, SHOWN as usize))
        .await;
    if let Ok(Ok(records)) = records {
        let rows: Vec<Vec<String>> = records
            .iter()
            .rev()
            .map(|r| {
                vec![
                    r.seq.to_string(),
                    esc(&crate::clock::rfc3339_ms(r.at_ms)),
                    esc(&r.kind),
                    esc(r.deployment.as_deref().unwrap_or("–")),
                    esc(&r.body.chars().take(300).collect::<String>()),
                ]
            })
            .collect();
        main.push_str(&format!("<h2>Newest {SHOWN} records</h2>"));
        main.push_str(&html::table(
            &["Seq", "At", "Kind", "Deployment", "Body"],
            &rows,
        ));
    }
    main.push_str(&html::cli(
        "wfhost journal verify --config CONFIG; wfhost journal show --config CONFIG",
    ));
    seen.page("Journal", &main).await
}
