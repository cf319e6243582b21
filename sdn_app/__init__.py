"""tsdn's SDN application: the pure decision core (`sdn_app.core`) and its adapters."""
