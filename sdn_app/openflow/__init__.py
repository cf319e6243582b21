"""The OpenFlow 1.3 adapter: plan specs encoded as messages, sent with barriers, over os-ken.

- `encoder`: pure builders of OpenFlow 1.3 messages from `sdn_app.core.plans` specs.
- `app`: `TsdnOpenFlowApp`, the os-ken app (base flows, ARP answers, datapath tracking,
  barrier and error routing).
- `fabric`: `start_openflow(topology, ...) -> Fabric`, os-ken in this process;
  `Fabric.apply(steps)` sends plan steps and confirms them with barriers.

Importing this package does not import os-ken; import the submodules.
"""
