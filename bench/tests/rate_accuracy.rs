//! The open loop holds its target rate: over 2 s measured, the received rate
//! is within 5 % of 1 000 and 10 000 msgs/s.

mod common;

use std::sync::Arc;

use tern_bench::load::Counters;
use tern_bench::server::Flavor;

#[test]
fn achieved_rate_is_within_five_percent_of_the_target() {
    let runtime = common::runtime();
    let server = common::start(Flavor::Nats);
    for rate in [1_000u64, 10_000] {
        let workload = common::workload(&format!(
            "name = \"rate-{rate}\"\nkind = \"core_pub_sub\"\nrate_per_second = {rate}\n\
             warmup_secs = 0.5\nduration_secs = 2\n"
        ));
        let measurement =
            common::measure(&runtime, &server, &workload, Arc::new(Counters::default()));
        let achieved = measurement.throughput_msgs_per_second;
        eprintln!(
            "target {rate}/s: achieved {achieved:.0}/s, sent {}",
            measurement.sent
        );
        assert!(
            (achieved - rate as f64).abs() <= rate as f64 * 0.05,
            "target {rate}/s, achieved {achieved:.0}/s"
        );
        // Every due send went out, and every one arrived.
        assert_eq!(measurement.sent, (rate as f64 * 2.5) as u64);
        assert_eq!(measurement.lost, 0);
    }
}
