# SPDX-License-Identifier: BSD-3-Clause
"""A shim package named as Mooncake's, for tests written against
Mooncake's Python API: ``from mooncake.engine import TransferEngine``
gets kvt's compatible class (kvt.compat.mooncake).  Tests only; a
serving stack changes its import instead."""
