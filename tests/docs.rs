//! The words a person reads held to the code: README's two check tables
//! (ids, order, which way a figure is worse, its default tolerance) and
//! `rehearse run --help` name the checks of `assertions::Check`, the one
//! table of checks, so a check added there and not here fails.

use crate::common;

use assertions::{Check, Worse};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The rows of the README table whose header line is `header`: each row's
/// cells, trimmed, the first one without its backquotes.
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    assert!(
        lines.next().is_some(),
        "README has no table headed {header}"
    );
    lines
        .skip(1) // the |---| line
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_readme_checklist_names_every_check_in_order() {
    let rows = table(&readme(), "| id | passes when |");
    let ids: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    let want: Vec<&str> = Check::ALL.iter().map(|c| c.id()).collect();
    assert_eq!(
        ids, want,
        "README's checklist table against assertions::Check::ALL"
    );
}

#[test]
fn the_readme_tolerances_are_the_checks_own() {
    let rows = table(
        &readme(),
        "| check | figure | unit | worse | default tolerance |",
    );
    let ids: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    let want: Vec<&str> = Check::ALL.iter().map(|c| c.id()).collect();
    assert_eq!(
        ids, want,
        "README's tolerance table against assertions::Check::ALL"
    );
    for (row, c) in rows.iter().zip(Check::ALL) {
        let worse = match c.worse() {
            Worse::Higher => "higher",
            Worse::Lower => "lower",
        };
        assert_eq!(row[3], worse, "{c}'s worse");
        let said = &row[4];
        match c.tolerance() {
            None => assert!(said.starts_with("none"), "{c}: {said}"),
            Some(t) if t.share == 0.0 && t.at_least == 0.0 => {
                assert_eq!(said, "any increase", "{c}")
            }
            Some(t) => {
                let pct = format!("{}%", wire::number::num(t.share * 100.0, 0));
                assert!(
                    said.starts_with(&pct),
                    "{c}: README says {said}, the code {pct}"
                );
                assert_eq!(said.contains("at least"), t.at_least > 0.0, "{c}: {said}");
            }
        }
    }
}

#[test]
fn run_help_offers_the_checks_an_external_run_may_leave_unjudged() {
    let out = common::rehearse().args(["run", "--help"]).output().unwrap();
    let help = common::text(&out);
    let ids: Vec<&str> = Check::must_judge_ids().collect();
    assert!(
        help.contains(&format!("[possible values: {}]", ids.join(", "))),
        "{help}"
    );
}
