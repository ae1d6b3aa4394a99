//! The open loop's schedule, end to end against a real server: every send
//! that falls due over the run goes out (late sends catch up, none are
//! skipped), every one is answered, and the reported throughput is the
//! measured-window count over the measured window. The achieved rate itself
//! is printed, never asserted: a rate is a timing, and timings are what
//! `tern bench` measures, not what a test on a loaded host can prove.

use crate::common;

use std::sync::Arc;

use tern_bench::load::Counters;
use tern_bench::server::Flavor;

#[test]
fn every_due_send_goes_out_and_is_answered() {
    let runtime = common::runtime();
    let server = common::start(Flavor::Nats);
    for rate in [1_000u64, 10_000] {
        let workload = common::workload(&format!(
            "name = \"rate-{rate}\"\nkind = \"core_pub_sub\"\nrate_per_second = {rate}\n\
             warmup_secs = 0.25\nduration_secs = 0.75\n"
        ));
        let measurement =
            common::measure(&runtime, &server, &workload, Arc::new(Counters::default()));
        eprintln!(
            "target {rate}/s: achieved {:.0}/s, sent {}",
            measurement.throughput_msgs_per_second, measurement.sent
        );
        // The schedule over warm-up plus measurement: rate × 1 s sends.
        assert_eq!(measurement.sent, rate);
        assert_eq!(measurement.completed, measurement.sent);
        assert_eq!(measurement.lost, 0);
        assert_eq!(measurement.errors, 0);
        assert!(measurement.measured_count <= measurement.sent);
        assert!((measurement.measured_secs - 0.75).abs() < 1e-9);
        assert_eq!(
            measurement.throughput_msgs_per_second,
            measurement.measured_count as f64 / measurement.measured_secs
        );
    }
}
