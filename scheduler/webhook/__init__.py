"""Tessera's admission webhook: validates GPU requests and queues, gives fractional containers their
`tessera.dev/gpu-slice` limit, and guards the scheduler's `tessera.dev/gpu-assignment` annotation."""

from scheduler.webhook.admission import AdmissionConfig, admit

__all__ = ["AdmissionConfig", "admit"]
