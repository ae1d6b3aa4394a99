use super::*;

const NO_LIMITS: StoreLimits = StoreLimits {
    max_file_bytes: -1,
    max_memory_bytes: -1,
};

/// Checks and applies, as the meta shard does.
fn run(
    catalog: &mut Catalog,
    operation: MetaOperation,
    name: &str,
    payload: &str,
) -> Result<MetaChange, MetaRefusal> {
    let change = catalog.check(operation, name, payload.as_bytes(), || 7)?;
    catalog.apply(&change);
    Ok(change)
}

fn refused_with(result: Result<MetaChange, MetaRefusal>) -> u32 {
    match result {
        Err(MetaRefusal::Api(error)) => error.code,
        other => panic!("not refused by the API: {other:?}"),
    }
}

#[test]
fn creates_updates_and_deletes_follow_nats_server() {
    let mut catalog = Catalog::new(NO_LIMITS);
    let created = run(
        &mut catalog,
        MetaOperation::Create,
        "A",
        r#"{"name":"A","subjects":["a.>"]}"#,
    );
    assert!(
        matches!(&created, Ok(MetaChange::Create { config, group: 7 }) if config.name == "A"),
        "{created:?}"
    );
    // The same create again is not a change; another config is a name in use.
    let again = run(
        &mut catalog,
        MetaOperation::Create,
        "A",
        r#"{"name":"A","subjects":["a.>"]}"#,
    );
    assert!(matches!(again, Ok(MetaChange::Exists { .. })), "{again:?}");
    let other = r#"{"name":"A","subjects":["b.>"]}"#;
    assert_eq!(
        refused_with(run(&mut catalog, MetaOperation::Create, "A", other)),
        10058
    );
    // Subjects may not overlap another stream's.
    let overlapping = r#"{"name":"B","subjects":["a.b"]}"#;
    assert_eq!(
        refused_with(run(&mut catalog, MetaOperation::Create, "B", overlapping)),
        10065
    );
    assert!(!catalog.contains("B"));
    // An update of a stream that does not exist.
    assert_eq!(
        refused_with(run(
            &mut catalog,
            MetaOperation::Update,
            "C",
            r#"{"name":"C"}"#
        )),
        10059
    );
    let updated = run(
        &mut catalog,
        MetaOperation::Update,
        "A",
        r#"{"name":"A","subjects":["a.>","c.>"]}"#,
    );
    assert!(
        matches!(&updated, Ok(MetaChange::Update { config }) if config.subjects.len() == 2),
        "{updated:?}"
    );
    // The update took: c.x now overlaps A.
    let now_overlapping = r#"{"name":"B","subjects":["c.x"]}"#;
    assert_eq!(
        refused_with(run(
            &mut catalog,
            MetaOperation::Create,
            "B",
            now_overlapping
        )),
        10065
    );
    // A delete wants an empty body and an existing stream.
    assert_eq!(
        refused_with(run(&mut catalog, MetaOperation::Delete, "A", "{\"x\":1}")),
        10038
    );
    assert!(run(&mut catalog, MetaOperation::Delete, "A", "").is_ok());
    assert!(!catalog.contains("A"));
    assert_eq!(
        refused_with(run(&mut catalog, MetaOperation::Delete, "A", "")),
        10059
    );
}

#[test]
fn reservations_count_every_stream_of_the_storage_type() {
    let mut catalog = Catalog::new(StoreLimits {
        max_file_bytes: 1000,
        max_memory_bytes: -1,
    });
    let file = |name: &str, max_bytes: i64| {
        format!(r#"{{"name":"{name}","subjects":["{name}"],"max_bytes":{max_bytes}}}"#)
    };
    assert!(run(&mut catalog, MetaOperation::Create, "A", &file("A", 600)).is_ok());
    // 600 + 500 > 1000.
    assert_eq!(
        refused_with(run(
            &mut catalog,
            MetaOperation::Create,
            "B",
            &file("B", 500)
        )),
        10047
    );
    assert!(run(&mut catalog, MetaOperation::Create, "B", &file("B", 400)).is_ok());
    // Full: a stream without max_bytes reserves one byte, which no longer fits.
    let unlimited = r#"{"name":"C","subjects":["C"]}"#;
    assert_eq!(
        refused_with(run(&mut catalog, MetaOperation::Create, "C", unlimited)),
        10047
    );
    // Memory streams count against their own (unlimited) store.
    let memory = r#"{"name":"M","subjects":["M"],"storage":"memory","max_bytes":5000}"#;
    assert!(run(&mut catalog, MetaOperation::Create, "M", memory).is_ok());
    // An update adds only its raise: lowering A frees room for B's raise.
    assert!(run(&mut catalog, MetaOperation::Update, "A", &file("A", 300)).is_ok());
    assert!(run(&mut catalog, MetaOperation::Update, "B", &file("B", 700)).is_ok());
    assert_eq!(
        refused_with(run(
            &mut catalog,
            MetaOperation::Update,
            "B",
            &file("B", 701)
        )),
        10047
    );
}

#[test]
fn a_damaged_stream_is_offline_and_a_failed_create_is_forgotten() {
    let mut catalog = Catalog::new(NO_LIMITS);
    catalog.load("D".to_string(), None);
    for operation in [MetaOperation::Create, MetaOperation::Update] {
        let result = catalog.check(operation, "D", br#"{"name":"D"}"#, || 1);
        assert_eq!(result, Err(MetaRefusal::Damaged));
    }
    // Deleting it is how an operator gets rid of it.
    assert!(run(&mut catalog, MetaOperation::Delete, "D", "").is_ok());
    let created = run(
        &mut catalog,
        MetaOperation::Create,
        "E",
        r#"{"name":"E","subjects":["e"]}"#,
    );
    assert!(created.is_ok());
    catalog.forget("E");
    assert!(!catalog.contains("E"));
}
