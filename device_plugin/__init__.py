"""Tessera kubelet device plugin (deviceplugin v1beta1) for fractional and whole GPUs."""
