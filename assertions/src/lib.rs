//! The pre-event checklist: pure functions from records to verdicts.
