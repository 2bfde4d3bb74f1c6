import sys

from opencoti_build.cli import main

sys.exit(main())
