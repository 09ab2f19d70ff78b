"""Pure helpers of the azure/gcp backends: labels, ages, cloud-init, names, dry-run prices."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.cloudvm import (
    TAG_TRANSFER,
    KeyPair,
    cloud_init,
    created_before,
    fleet_tags,
    gcp_labels,
    parse_cloud_init,
    region_of,
)
from skyplane_ops.provision.mixed import describe, format_dry_run, provider_of, split_by_provider


def test_gcp_labels_are_valid_and_times_stay_comparable() -> None:
    labels = gcp_labels(fleet_tags("Nightly_42", 3600, {"Team": "Data Eng"}))
    assert labels["skyplane-ops_transfer-id"] == "nightly_42"
    assert labels["team"] == "data_eng"
    assert int(labels["skyplane-ops_expires-at"]) - int(labels["skyplane-ops_created-at"]) == 3600
    assert all(len(k) <= 63 and len(v) <= 63 for k, v in labels.items())


def test_created_before_reads_iso_and_epoch_and_treats_undated_as_old() -> None:
    old = datetime.now(UTC) - timedelta(hours=3)
    assert created_before(old.isoformat(), 3600)
    assert created_before(str(int(old.timestamp())), 3600)
    assert not created_before(datetime.now(UTC).isoformat(), 3600)
    assert created_before(None, 3600) and created_before("garbage", 3600)
    assert created_before(datetime.now(UTC).isoformat(), None)


def test_cloud_init_carries_the_host_key_we_generated() -> None:
    host, client = KeyPair.generate(), KeyPair.generate()
    text = cloud_init(user="ubuntu", authorized_key=client.public, host_key=host)
    assert text.startswith("#cloud-config\n")
    config = parse_cloud_init(text)
    assert config["ssh_keys"]["ed25519_public"] == host.public
    assert config["ssh_keys"]["ed25519_private"] == host.private_pem
    (user,) = config["users"]  # no distribution default user with its own sudo
    assert user["ssh_authorized_keys"] == [client.public] and "sudo" not in user
    assert config["ssh_deletekeys"] is True and config["ssh_genkeytypes"] == []


def test_the_deadline_helper_only_extends_within_its_cap_and_sudo_grants_only_it() -> None:
    """The root-owned deadline cloud-init installs, run for real in a fake guest: ``extend``
    pushes it later but never past the cap nor earlier; the login may run the helper's
    ``extend``/``poweroff`` as root and nothing else (not ``start``, not ``shutdown``)."""
    import subprocess

    from skyplane_ops.provision.cloudvm import DEADLINE_HELPER, deadline_cloud_init
    from tests.fakes.vm import LoopbackVM
    from tests.fakes.vmuser import ensure_user

    key = KeyPair.generate()
    text = cloud_init(
        user="skyplane",
        authorized_key=key.public,
        host_key=key,
        extra=deadline_cloud_init("skyplane", 100, 200),
    )
    vm = LoopbackVM.boot("127.0.0.1", None, text)
    try:
        assert vm.guest is not None
        state, env = vm.guest.root / "var/lib/skyplane-ops", {"PATH": vm.guest.path}
        login = ensure_user("skyplane")  # a real non-root account: the kernel says who it is

        def run(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                argv, env=env, user=login.pw_uid, group=login.pw_gid, extra_groups=[], cwd="/",
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip

        cap, first = int((state / "cap").read_text()), int((state / "deadline").read_text())
        assert cap - first == 100
        assert run("sudo", "-n", DEADLINE_HELPER, "extend", "10").returncode == 0
        assert int((state / "deadline").read_text()) == first, "never earlier"
        assert run("sudo", "-n", DEADLINE_HELPER, "extend", "150").returncode == 0
        assert first < int((state / "deadline").read_text()) <= cap
        assert run("sudo", "-n", DEADLINE_HELPER, "extend", "99999").returncode == 0
        assert int((state / "deadline").read_text()) == cap, "never past the cap"
        assert run("sudo", "-n", DEADLINE_HELPER, "extend", "1;true").returncode != 0
        for argv in (
            ("sudo", "-n", DEADLINE_HELPER, "start", "9999", "9999"),
            ("sudo", "-n", "/bin/sh", "-c", "true"),
            ("shutdown", "-h", "now"),
            ("systemctl", "poweroff"),
            ("sh", "-c", f"echo 9999999999 > {state}/deadline"),  # root's file, not the login's
            ("sh", "-c", f"echo 9999999999 > {state}/cap"),
        ):
            assert run(*argv).returncode != 0, argv
        assert int((state / "cap").read_text()) == cap and not vm.powered_off
        assert (
            (vm.guest.root / "etc/sudoers.d/90-skyplane-ops")
            .read_text()
            .startswith("skyplane ALL=(root) NOPASSWD: " + DEADLINE_HELPER + " extend *")
        )
    finally:
        vm.stop()


def test_cloud_init_makes_one_unprivileged_login_and_no_secret_without_a_host_key() -> None:
    """The VM's only login has no sudo (the image's default user, which has passwordless sudo
    on Ubuntu, is not created), and with no host key given the user-data carries no private
    material: the VM generates its key (cloud-init prints it on the console)."""
    client = KeyPair.generate()
    text = cloud_init(user="skyplane", authorized_key=client.public)
    config = parse_cloud_init(text)
    assert config["users"] == [
        {
            "name": "skyplane",
            "shell": "/bin/bash",
            "lock_passwd": True,
            "ssh_authorized_keys": [client.public],
        }
    ], "no 'default' user, no sudo rule, no extra groups"
    assert "sudo" not in text.lower() and "PRIVATE KEY" not in text
    assert "ssh_keys" not in config and config["ssh_genkeytypes"] == ["ed25519"]
    assert config["ssh_pwauth"] is False and config["disable_root"] is True


def test_the_login_s_only_sudo_is_the_deadline_helper_rule() -> None:
    """With the deadline (every backend's cloud-init), the unprivileged login still has no
    sudo of its own and no extra groups: the one sudoers rule cloud-init writes lets it run
    the root helper's ``extend``/``poweroff`` and nothing else."""
    from skyplane_ops.provision.cloudvm import DEADLINE_HELPER, deadline_cloud_init

    client = KeyPair.generate()
    text = cloud_init(
        user="skyplane",
        authorized_key=client.public,
        extra=deadline_cloud_init("skyplane", 60, 120),
    )
    config = parse_cloud_init(text)
    (login,) = config["users"]
    assert not {"sudo", "groups"} & set(login), "no sudo rule or group of its own"
    sudoers = [f for f in config["write_files"] if f["path"].startswith("/etc/sudoers")]
    assert [f["content"] for f in sudoers] == [
        f"skyplane ALL=(root) NOPASSWD: {DEADLINE_HELPER} extend *, {DEADLINE_HELPER} poweroff\n"
    ]
    assert sudoers[0]["owner"] == "root:root" and sudoers[0]["permissions"] == "0440"
    assert "PRIVATE KEY" not in text and "ssh_keys" not in config


def test_regions_must_name_their_cloud() -> None:
    assert region_of("gcp:us-central1", "gcp") == "us-central1"
    with pytest.raises(ProvisionError, match="not a gcp region"):
        region_of("azure:westus2", "gcp")
    assert provider_of("azure:westus2") == "azure"
    with pytest.raises(ProvisionError, match="names no cloud"):
        split_by_provider({"us-east-1": 1})
    assert split_by_provider({"aws:a": 1, "gcp:b": 0, "gcp:c": 2}) == {
        "aws": {"aws:a": 1},
        "gcp": {"gcp:c": 2},
    }


def test_dry_run_prices_without_credentials() -> None:
    rows = describe("gcp", {"machine_type": "n2-standard-8"}, {"gcp:us-central1": 2}, "t1")
    vms = [r for r in rows if "instance" in r[0]]
    assert [p for _, p in vms] == [0.388, 0.388]
    assert all(TAG_TRANSFER not in w for w, _ in rows)
    table = format_dry_run(rows)
    assert table.splitlines()[-1].strip().startswith(f"{0.388 * 2 + 0.01:.3f}")
    rows = describe("azure", {}, {"azure:westus2": 1}, "t1")
    assert (
        "azure VM skyplane-ops-t1-westus2-0 Standard_D32_v5 + StandardSSD OS disk",
        1.536,
    ) in rows


def test_gcp_refuses_names_compute_engine_would_reject_before_calling_it() -> None:
    from skyplane_ops.provision.gcp import GCPProvisioner

    prov = GCPProvisioner(project="p", credentials="anonymous", endpoint="http://192.0.2.1:9")
    with pytest.raises(ProvisionError, match="too long for Compute Engine names"):
        prov.provision({"gcp:asia-northeast1": 1}, transfer_id="x" * 50)
    assert prov._network("Nightly_42") == "skyplane-ops-nightly-42"


def test_backend_options_for_mixed_take_one_table_per_cloud() -> None:
    from skyplane_ops.provision.sweeper import backend_options_for

    text = '{"aws": {"instance_type": "m5.8xlarge"}, "gcp": {"project": "p"}}'
    assert backend_options_for(text, "mixed") == {
        "aws": {"instance_type": "m5.8xlarge"},
        "gcp": {"project": "p"},
    }
    assert backend_options_for(text, "gcp") == {"project": "p"}
