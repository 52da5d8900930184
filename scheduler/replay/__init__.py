"""Trace replay of the Alibaba openb format under the FGD paper's evaluation protocol."""
