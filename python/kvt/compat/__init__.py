# SPDX-License-Identifier: BSD-3-Clause
"""Drop-in classes with other transfer engines' interfaces, over kvt."""
import time


def await_regions(peer, peers, lens, seconds=1.0):
    """A region the peer registered a moment ago may still be on its way
    here (its announcement follows the registration): wait up to seconds
    for the peer's exports to cover every range.  True once they do."""
    spans = [(peers, lens)] if isinstance(lens, int) else \
        list(zip((int(p) for p in peers), (int(n) for n in lens)))
    end = time.monotonic() + seconds
    while True:
        regs = [(r["base"], r["len"]) for r in peer.regions()]
        if all(any(b <= a and a + n <= b + ln for b, ln in regs)
               for a, n in spans):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
