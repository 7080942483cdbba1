import sys

from connector.app.cli import main

sys.exit(main())
