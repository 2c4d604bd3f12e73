//! End-to-end tests: the gateway on port 0, the real fake provider behind it
//! (also on port 0), and a real HTTP client in front, driving it open-loop
//! (each request spawned at its time, never waiting for the previous one).

#[path = "e2e/support.rs"]
mod support;

#[path = "e2e/aimd.rs"]
mod aimd;
#[path = "e2e/bad_input.rs"]
mod bad_input;
#[path = "e2e/bounded.rs"]
mod bounded;
#[path = "e2e/deadline.rs"]
mod deadline;
#[path = "e2e/hang_up.rs"]
mod hang_up;
#[path = "e2e/naive.rs"]
mod naive;
#[path = "e2e/passthrough.rs"]
mod passthrough;
#[path = "e2e/pool_demo.rs"]
mod pool_demo;
