# SPDX-License-Identifier: BSD-3-Clause
"""Drop-in classes with other transfer engines' interfaces, over kvt."""
