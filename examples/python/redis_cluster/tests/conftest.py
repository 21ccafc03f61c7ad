# SPDX-License-Identifier: Apache-2.0
# The connector module sits one directory up, beside the README.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
