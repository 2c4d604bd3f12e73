//! One fuzz target, named by `REHEARSE_FUZZ_TARGET`, as an AFL++ harness
//! (built by `cargo afl build`, see `fuzz/run.sh`). Built without AFL, it
//! runs the target once on standard input: reproduce a crash with
//! `REHEARSE_FUZZ_TARGET=go_duration cargo run -p rehearse-fuzz --bin afl < crash`.

fn main() {
    let name = std::env::var("REHEARSE_FUZZ_TARGET").unwrap_or_default();
    let Some(target) = rehearse_fuzz::target(&name) else {
        let names: Vec<_> = rehearse_fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("REHEARSE_FUZZ_TARGET must be one of {names:?}");
        std::process::exit(2);
    };
    #[cfg(fuzzing)]
    afl::fuzz!(|data: &[u8]| { (target.run)(data) });
    #[cfg(not(fuzzing))]
    {
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut data).expect("read standard input");
        (target.run)(&data);
    }
}
