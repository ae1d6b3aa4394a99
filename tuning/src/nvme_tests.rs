use super::*;

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../tests/fixtures/nvme/", $name))
    };
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn namespace(nsid: u32, id_ns: &str, attached: bool) -> Namespace {
    Namespace {
        nsid,
        identity: NamespaceIdentity::from_id_ns(id_ns).unwrap(),
        attached,
        device: attached.then(|| format!("/dev/nvme0n{nsid}")),
        mounted: None,
        contents: None,
    }
}

/// QEMU's controller as the test shim reports it: 1 GiB of capacity.
fn qemu_controller() -> Controller {
    Controller {
        total_bytes: u128::from(GIB),
        ..Controller::from_id_ctrl(fixture!("qemu-id-ctrl.json")).unwrap()
    }
}

/// A namespace of `bytes` in QEMU's 4 KiB format.
fn qemu_block_namespace(nsid: u32, bytes: u64, attached: bool) -> Namespace {
    let mut found = namespace(nsid, fixture!("qemu-id-ns-1.json"), attached);
    found.identity.format_index = 4;
    found.identity.size_blocks = bytes / BLOCK_BYTES;
    found
}

#[test]
fn qemu_json_parses() {
    let controller = Controller::from_id_ctrl(fixture!("qemu-id-ctrl.json")).unwrap();
    assert_eq!(controller.cntlid, 0);
    assert_eq!(controller.model, "QEMU NVMe Ctrl");
    assert_eq!(controller.total_bytes, 0, "tnvmcap is the string \"0\"");
    assert!(controller.namespace_management, "oacs 0x12a has bit 3");
    assert_eq!(controller.namespaces_max, 256);
    assert_eq!(
        namespace_ids(fixture!("qemu-list-ns-all.json")),
        Ok(vec![1, 2, 3])
    );
    let identity = NamespaceIdentity::from_id_ns(fixture!("qemu-id-ns-1.json")).unwrap();
    assert_eq!((identity.block_bytes(), identity.bytes()), (512, GIB));
    assert_eq!(identity.formats.len(), 8);
    let format = identity.block_format().unwrap();
    assert_eq!((format.index, format.data_bytes), (4, 4096));
    assert!(!identity.is_block_formatted());
    let second = NamespaceIdentity::from_id_ns(fixture!("qemu-id-ns-2.json")).unwrap();
    assert_eq!(second.bytes(), 256 * MIB);
}

#[test]
fn a_factory_namespace_is_replaced_by_journal_and_store() {
    let controller = qemu_controller();
    let factory = namespace(1, fixture!("qemu-id-ns-1.json"), true);
    let plan = plan(&controller, &[factory], 256 * MIB, false).unwrap();
    assert_eq!(
        (plan.journal_bytes, plan.store_bytes),
        (256 * MIB, 768 * MIB)
    );
    assert_eq!(
        plan.steps,
        vec![
            Step::Detach(1),
            Step::Delete(1),
            Step::Create {
                role: Role::Journal,
                blocks: 65536,
                format: 4
            },
            Step::Create {
                role: Role::Store,
                blocks: 196608,
                format: 4
            },
            Step::Attach(Target::Created(Role::Journal)),
            Step::Attach(Target::Created(Role::Store)),
            Step::Rescan,
        ]
    );
    let commands: Vec<String> = plan
        .steps
        .iter()
        .map(|step| step.command("/dev/nvme0", 0, |_| None).join(" "))
        .collect();
    assert_eq!(
        commands[0],
        "detach-ns /dev/nvme0 --namespace-id=1 --controllers=0"
    );
    assert_eq!(
        commands[2],
        "create-ns /dev/nvme0 --nsze=65536 --ncap=65536 --flbas=4"
    );
    assert_eq!(
        commands[4],
        "attach-ns /dev/nvme0 --namespace-id=<nsid of the new journal namespace> --controllers=0"
    );
    let known = plan.steps[5].command("/dev/nvme0", 0, |role| (role == Role::Store).then_some(3));
    assert_eq!(
        known.join(" "),
        "attach-ns /dev/nvme0 --namespace-id=3 --controllers=0"
    );
}

#[test]
fn a_carved_drive_plans_nothing_or_only_what_is_missing() {
    let controller = qemu_controller();
    let carved = [
        qemu_block_namespace(2, 256 * MIB, true),
        qemu_block_namespace(3, 768 * MIB, true),
    ];
    let again = plan(&controller, &carved, 256 * MIB, false).unwrap();
    assert_eq!(again.steps, vec![]);
    assert_eq!((again.journal_nsid, again.store_nsid), (Some(2), Some(3)));
    // A journal size not a whole MiB is rounded up the same way each time.
    assert_eq!(
        plan(&controller, &carved, 256 * MIB - 5, false)
            .unwrap()
            .steps,
        vec![]
    );
    let detached = [
        qemu_block_namespace(2, 256 * MIB, false),
        qemu_block_namespace(3, 768 * MIB, true),
    ];
    assert_eq!(
        plan(&controller, &detached, 256 * MIB, false)
            .unwrap()
            .steps,
        vec![Step::Attach(Target::Nsid(2)), Step::Rescan]
    );
    // Another journal size: a new carve, refused while the namespaces hold data.
    let mut holding = carved.clone();
    holding[0].contents = Some("a tern journal".into());
    assert_eq!(
        plan(&controller, &holding, 128 * MIB, false),
        Err(NvmeError::HoldsData {
            nsid: 2,
            contents: "a tern journal".into()
        })
    );
    let forced = plan(&controller, &holding, 128 * MIB, true).unwrap();
    assert_eq!(
        forced.steps[..4],
        [
            Step::Detach(2),
            Step::Delete(2),
            Step::Detach(3),
            Step::Delete(3)
        ]
    );
    holding[1].mounted = Some("/var/lib/tern".into());
    assert!(matches!(
        plan(&controller, &holding, 128 * MIB, true),
        Err(NvmeError::Mounted { nsid: 3, .. })
    ));
}

#[test]
fn the_4k_format_is_chosen_by_relative_performance() {
    let controller = Controller::from_id_ctrl(fixture!("enterprise-id-ctrl.json")).unwrap();
    assert_eq!(controller.total_bytes, 3_840_755_982_336);
    let factory = namespace(1, fixture!("enterprise-id-ns-1.json"), true);
    let journal = 8 * GIB + MIB;
    let plan = plan(&controller, &[factory], journal, false).unwrap();
    let store = (3_840_755_982_336 - journal) / MIB * MIB;
    assert_eq!(plan.store_bytes, store);
    assert_eq!(
        plan.steps[2..4],
        [
            Step::Create {
                role: Role::Journal,
                blocks: journal / 4096,
                format: 1
            },
            Step::Create {
                role: Role::Store,
                blocks: store / 4096,
                format: 1
            }
        ]
    );
}

#[test]
fn a_drive_without_namespace_management_is_refused_with_what_to_do() {
    let controller = Controller::from_id_ctrl(fixture!("client-id-ctrl.json")).unwrap();
    assert!(!controller.namespace_management);
    let factory = namespace(1, fixture!("client-id-ns-1.json"), true);
    let refused = plan(&controller, &[factory], GIB, false).unwrap_err();
    assert_eq!(
        refused,
        NvmeError::NoNamespaceManagement { journal_bytes: GIB }
    );
    assert!(refused.to_string().contains("vendor's tool"));
}

#[test]
fn a_namespace_in_a_metadata_format_is_reformatted_in_place() {
    let controller = Controller::from_id_ctrl(fixture!("metadata-id-ctrl.json")).unwrap();
    let carved = [
        namespace(1, fixture!("metadata-id-ns-1.json"), true),
        namespace(2, fixture!("metadata-id-ns-2.json"), true),
    ];
    assert_eq!(
        plan(&controller, &carved, 256 * MIB, false).unwrap().steps,
        vec![]
    );
    let metadata = [
        namespace(1, fixture!("metadata-id-ns-1.json"), true),
        namespace(2, fixture!("metadata-id-ns-2-with-metadata.json"), true),
    ];
    assert_eq!(metadata[1].identity.metadata_bytes(), 8);
    assert_eq!(
        plan(&controller, &metadata, 256 * MIB, false)
            .unwrap()
            .steps,
        vec![Step::Format { nsid: 2, format: 2 }, Step::Rescan]
    );
}

#[test]
fn refusals_and_bad_json() {
    let mut controller = qemu_controller();
    let factory = namespace(1, fixture!("qemu-id-ns-1.json"), true);
    assert_eq!(
        plan(&controller, std::slice::from_ref(&factory), GIB, false),
        Err(NvmeError::TooSmall {
            total_bytes: u128::from(GIB),
            journal_bytes: GIB
        })
    );
    controller.total_bytes = 0;
    assert_eq!(
        plan(&controller, &[factory], MIB, false),
        Err(NvmeError::NoCapacity)
    );
    assert!(Controller::from_id_ctrl("{").is_err());
    assert!(Controller::from_id_ctrl("{\"cntlid\":0}").is_err());
    assert!(namespace_ids("{\"nsid_list\":[{\"nsid\":-1}]}").is_err());
    assert!(NamespaceIdentity::from_id_ns(
        "{\"nsze\":1,\"flbas\":3,\"lbafs\":[{\"ms\":0,\"ds\":9,\"rp\":0}]}"
    )
    .is_err());
    assert!(NamespaceIdentity::from_id_ns(
        "{\"nsze\":1,\"flbas\":0,\"lbafs\":[{\"ms\":0,\"ds\":70,\"rp\":0}]}"
    )
    .is_err());
}

#[test]
fn the_created_nsid_is_read_from_nvme_cli_output() {
    assert_eq!(
        created_nsid("create-ns: Success, created nsid:2\n"),
        Some(2)
    );
    assert_eq!(
        created_nsid("NVMe status: Invalid Command Opcode(0x4001)"),
        None
    );
}
