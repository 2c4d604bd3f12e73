//! The words a person reads held to the code: the check tables of
//! README.md (the checklist at a glance), docs/checklist.md (each rule)
//! and docs/compare.md (which way a figure is worse, its default
//! tolerance), and `rehearse run --help`, name the checks of
//! `assertions::Check`, the one table of checks, so a check added there
//! and not here fails. (tests/doc_links.rs checks the docs' links,
//! command lines and scenario blocks.)

use crate::common;

use assertions::{Check, Worse};

/// The text of `file`, a path from the repository's root.
fn doc(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rows of the table whose header line is `header` in `text`: each
/// row's cells, trimmed, the first one without its backquotes.
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    assert!(lines.next().is_some(), "no table headed {header}");
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
fn the_checklist_tables_name_every_check_in_order() {
    let want: Vec<&str> = Check::ALL.iter().map(|c| c.id()).collect();
    for file in ["README.md", "docs/checklist.md"] {
        let rows = table(&doc(file), "| id | passes when |");
        let ids: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(
            ids, want,
            "{file}'s checklist table against assertions::Check::ALL"
        );
    }
}

#[test]
fn the_documented_tolerances_are_the_checks_own() {
    let rows = table(
        &doc("docs/compare.md"),
        "| check | figure | unit | worse | default tolerance |",
    );
    let ids: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    let want: Vec<&str> = Check::ALL.iter().map(|c| c.id()).collect();
    assert_eq!(
        ids, want,
        "docs/compare.md's tolerance table against assertions::Check::ALL"
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
                    "{c}: docs/compare.md says {said}, the code {pct}"
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
