//! Monitoring HTTP endpoints: `/healthz`, `/varz` (fields and counters that
//! move with traffic), `/connz` (incl. `?cid=`; tern adds `shard` to each
//! entry), `/subsz` against both servers, and tern's Prometheus `/metrics`.

use crate::common;

use common::{next_message, sync_interest, Flavor, Server, TIMEOUT};

async fn healthz(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (status, body) = server.http_get("/healthz");
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).expect("healthz JSON");
    assert_eq!(health["status"], "ok", "{body}");
    let (status, _) = server.http_get("/no/such/endpoint");
    assert_eq!(status, 404);
}
differential!(healthz);

fn number(varz: &serde_json::Value, field: &str) -> u64 {
    varz[field]
        .as_u64()
        .unwrap_or_else(|| panic!("/varz {field} is not a number: {}", varz[field]))
}

async fn varz(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let before = server.varz();
    assert!(
        before["server_id"]
            .as_str()
            .is_some_and(|id| id.len() == 56),
        "{before}"
    );
    assert!(
        before["version"]
            .as_str()
            .is_some_and(|version| version.starts_with("2.15.")),
        "{before}"
    );
    for field in [
        "connections",
        "total_connections",
        "in_msgs",
        "out_msgs",
        "in_bytes",
        "out_bytes",
        "slow_consumers",
        "subscriptions",
        "mem",
        "cores",
        "max_payload",
    ] {
        number(&before, field);
    }
    assert_eq!(number(&before, "max_payload"), 1024 * 1024);
    assert!(number(&before, "cores") >= 1);
    assert!(number(&before, "mem") > 0);
    assert_eq!(number(&before, "connections"), 0);

    let client = server.connect().await;
    let publisher = server.connect().await;
    let mut subscriber = client.subscribe("varz.counting").await.unwrap();
    sync_interest(&client, &publisher).await;
    let probe_in = number(&server.varz(), "in_msgs");
    for _ in 0..10 {
        publisher
            .publish("varz.counting", "12345".into())
            .await
            .unwrap();
    }
    common::flush(&publisher).await;
    for _ in 0..10 {
        next_message(&mut subscriber, TIMEOUT).await;
    }
    let base_in = number(&before, "in_msgs");
    let base_out = number(&before, "out_msgs");
    let after = server
        .wait_varz("counters to include the 10 messages", TIMEOUT, |varz| {
            number(varz, "in_msgs") >= probe_in + 10
                && number(varz, "out_msgs") >= base_out + 10
                && number(varz, "in_bytes") >= number(&before, "in_bytes") + 50
                && number(varz, "out_bytes") >= number(&before, "out_bytes") + 50
        })
        .await;
    assert!(number(&after, "in_msgs") >= base_in + 10);
    assert_eq!(number(&after, "connections"), 2, "{after}");
    assert!(number(&after, "total_connections") >= number(&before, "total_connections") + 2);
    assert!(number(&after, "subscriptions") > number(&before, "subscriptions"));
    assert_eq!(number(&after, "slow_consumers"), 0);

    drop(subscriber);
    drop(client);
    server
        .wait_varz("connections back to 1", TIMEOUT, |varz| {
            number(varz, "connections") == 1
        })
        .await;
}
differential!(varz);

async fn connz(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let client = server
        .connect_with(async_nats::ConnectOptions::new().name("connz-test"))
        .await;
    let cid = client.server_info().client_id;
    assert!(cid > 0);
    let connz = server.http_json("/connz");
    let list = connz["connections"].as_array().expect("connections array");
    let entry = list
        .iter()
        .find(|entry| entry["cid"].as_u64() == Some(cid))
        .unwrap_or_else(|| panic!("cid {cid} missing from /connz: {connz:#}"));
    assert_eq!(connz["num_connections"].as_u64(), Some(list.len() as u64));
    assert_eq!(entry["name"], "connz-test", "{entry}");
    assert_eq!(entry["lang"], "rust", "{entry}");
    assert_eq!(entry["ip"], "127.0.0.1");
    assert!(entry["port"].as_u64().is_some());
    if flavor == Flavor::Tern {
        for entry in list {
            assert!(
                entry["shard"].as_u64().is_some(),
                "tern /connz entries have a shard: {entry}"
            );
        }
    }
    // ?cid= selects one connection.
    let second = server.connect().await;
    let second_cid = second.server_info().client_id;
    assert_ne!(cid, second_cid);
    let one = server.http_json(&format!("/connz?cid={second_cid}"));
    let list = one["connections"].as_array().expect("connections array");
    assert_eq!(list.len(), 1, "{one:#}");
    assert_eq!(list[0]["cid"].as_u64(), Some(second_cid));
    // Paging: limit and offset over the connections sorted by cid.
    let page = server.http_json("/connz?limit=1&offset=1");
    assert_eq!(page["limit"], 1, "{page:#}");
    assert_eq!(page["offset"], 1, "{page:#}");
    assert_eq!(page["total"], 2, "{page:#}");
    assert_eq!(page["num_connections"], 1, "{page:#}");
    assert_eq!(
        page["connections"][0]["cid"].as_u64(),
        Some(cid.max(second_cid)),
        "{page:#}"
    );
    // ?subs=1 lists the subscriptions.
    let _subscription = second.subscribe("connz.listed").await.unwrap();
    sync_interest(&second, &client).await;
    server
        .wait_json(
            &format!("/connz?cid={second_cid}&subs=1"),
            "the subscription listed",
            TIMEOUT,
            &mut |connz| {
                connz["connections"][0]["subscriptions_list"]
                    .as_array()
                    .is_some_and(|subs| subs.iter().any(|sub| sub == "connz.listed"))
            },
        )
        .await;
}
differential!(connz);

async fn subsz(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let base = server.http_json("/subsz")["num_subscriptions"]
        .as_u64()
        .expect("num_subscriptions");
    let client = server.connect().await;
    let mut subscriptions = Vec::new();
    for index in 0..5 {
        subscriptions.push(client.subscribe(format!("subsz.{index}")).await.unwrap());
    }
    common::flush(&client).await;
    server
        .wait_json("/subsz", "5 more subscriptions", TIMEOUT, &mut |subsz| {
            subsz["num_subscriptions"].as_u64() == Some(base + 5)
        })
        .await;
    drop(subscriptions);
    server
        .wait_json("/subsz", "subscriptions removed", TIMEOUT, &mut |subsz| {
            subsz["num_subscriptions"].as_u64() == Some(base)
        })
        .await;
}
differential!(subsz);

/// Sum of a Prometheus counter over all its labelled series.
fn metric_sum(body: &str, name: &str) -> Option<u64> {
    let mut found = false;
    let mut sum = 0;
    for line in body.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let series_name = series.split('{').next().unwrap_or(series);
        if series_name == name {
            found = true;
            sum += value
                .trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("bad sample {line:?}"));
        }
    }
    found.then_some(sum)
}

async fn metrics() {
    let server = Server::default_for(Flavor::Tern);
    let (status, body) = server.http_get("/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("# TYPE tern_in_msgs_total counter"), "{body}");
    let before = metric_sum(&body, "tern_in_msgs_total").expect("tern_in_msgs_total samples");
    let client = server.connect().await;
    for _ in 0..3 {
        client.publish("metrics.count", "x".into()).await.unwrap();
    }
    common::flush(&client).await;
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let (_, body) = server.http_get("/metrics");
        if metric_sum(&body, "tern_in_msgs_total").unwrap_or(0) >= before + 3 {
            assert!(
                metric_sum(&body, "tern_connections").unwrap_or(0) >= 1,
                "{body}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tern_in_msgs_total never counted 3 publishes:\n{body}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
tern_only!(metrics);

/// `/jsz` on one server, as nats-server's: what the Prometheus exporter
/// asks (`accounts`, `streams`, `consumers`, `config`) lists the account
/// `$G` (its usage the server's) with every stream, each with a `cluster`
/// block naming this server as leader and no cluster name, its config
/// and state, and its durables (no `cluster` block on one server); no
/// `meta_cluster`, no Raft group names; this server leads for
/// `leader-only` and `raft`'s counts.
async fn jsz_on_one_server(flavor: Flavor) {
    let server = Server::start(flavor, common::Options::jetstream());
    let client = server.connect().await;
    for (name, storage) in [("FILES", "file"), ("MEMORY", "memory")] {
        let config = serde_json::json!({
            "name": name,
            "subjects": [format!("{}.>", name.to_lowercase())],
            "storage": storage,
        });
        common::js::api_ok(
            &client,
            &format!("$JS.API.STREAM.CREATE.{name}"),
            &config.to_string(),
        )
        .await;
    }
    let durable = serde_json::json!({
        "stream_name": "FILES",
        "config": {"durable_name": "D", "ack_policy": "explicit", "description": "d"},
    });
    common::js::api_ok(
        &client,
        "$JS.API.CONSUMER.DURABLE.CREATE.FILES.D",
        &durable.to_string(),
    )
    .await;
    common::js::publish_all(&client, &["files.a", "files.b", "memory.a"]).await;
    let name = server.varz()["server_name"]
        .as_str()
        .expect("a server name")
        .to_string();

    let jsz = server.http_json("/jsz?accounts=true&streams=true&consumers=true&config=true");
    assert!(jsz.get("meta_cluster").is_none(), "{jsz}");
    assert_eq!(
        (&jsz["streams"], &jsz["consumers"], &jsz["messages"]),
        (&2.into(), &1.into(), &3.into()),
        "{jsz}"
    );
    assert!(jsz["now"].is_string() && jsz["config"].is_object(), "{jsz}");
    assert_eq!(jsz["api"]["level"], 5, "{jsz}");
    let account = &jsz["account_details"][0];
    assert_eq!(account["name"], "$G", "{jsz}");
    assert_eq!(account["storage"], jsz["storage"], "{jsz}");
    assert_eq!(account["memory"], jsz["memory"], "{jsz}");
    assert_eq!(account["reserved_storage"], u64::MAX, "{jsz}");
    let mut streams = common::js::jsz_streams(&jsz);
    streams.sort_by_key(|stream| stream["name"].as_str().map(str::to_string));
    assert_eq!(streams.len(), 2, "{jsz}");
    for stream in &streams {
        assert_eq!(
            stream["cluster"],
            serde_json::json!({ "leader": name }),
            "{stream}"
        );
        assert_eq!(stream["config"]["name"], stream["name"], "{stream}");
        assert!(stream.get("stream_raft_group").is_none(), "{stream}");
    }
    assert_eq!(streams[0]["state"]["messages"], 2, "{jsz}");
    assert_eq!(streams[0]["state"]["consumer_count"], 1, "{jsz}");
    assert_eq!(streams[1]["config"]["storage"], "memory", "{jsz}");
    assert!(streams[1].get("consumer_detail").is_none(), "{jsz}");
    let consumers = streams[0]["consumer_detail"].as_array().expect("D");
    assert_eq!(consumers.len(), 1, "{jsz}");
    let consumer = &consumers[0];
    assert_eq!(consumer["name"], "D", "{consumer}");
    assert_eq!(consumer["config"]["description"], "d", "{consumer}");
    assert_eq!(consumer["num_pending"], 2, "{consumer}");
    assert!(
        consumer.get("cluster").is_none(),
        "none on one server: {consumer}"
    );

    let raft = server.http_json("/jsz?consumers=true&raft=true");
    assert_eq!(
        (&raft["streams_leader"], &raft["consumers_leader"]),
        (&2.into(), &1.into())
    );
    for stream in common::js::jsz_streams(&raft) {
        assert!(stream.get("stream_raft_group").is_none(), "{stream}");
        assert!(stream.get("config").is_none(), "{stream}");
    }
    let (status, body) = server.http_get("/jsz?leader-only=true");
    assert_eq!(status, 200, "one server leads: {body}");
    let (status, body) = server.http_get("/jsz?raft=2");
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body,
        "Error decoding boolean for 'raft': strconv.ParseBool: parsing \"2\": invalid syntax"
    );
}
differential!(jsz_on_one_server);
