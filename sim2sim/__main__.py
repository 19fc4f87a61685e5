from sim2sim.cli import main

raise SystemExit(main())
