import sys

from .folder import main

sys.exit(main())
