import sys

from lib.grading.grader.folder import main

sys.exit(main())
