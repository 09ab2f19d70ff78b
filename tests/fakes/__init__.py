"""FAKES of cloud control-plane REST APIs (Azure Resource Manager, Compute Engine).

No emulator exists for these APIs, so these small HTTP servers implement only the endpoints the
azure and gcp backends call, with the real wire formats, so that the real SDKs talk to them by
endpoint configuration. Their "VMs" are real: each runs an OpenSSH sshd on its own loopback
address with the host key and client key from the VM's cloud-init data (``tests/fakes/vm.py``).
"""
