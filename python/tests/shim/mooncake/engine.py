# SPDX-License-Identifier: BSD-3-Clause
"""mooncake.engine, as kvt.compat.mooncake provides it (tests only)."""
from kvt.compat.mooncake import (SUPPORT_CUDA, SUPPORT_EFA, SUPPORT_HIP,  # noqa: F401
                                 SUPPORT_INTRA_NVLINK, SUPPORT_MNNVL,
                                 SUPPORT_MUSA, Read, TransferEngine,
                                 TransferNotify, TransferOpcode, Write)
