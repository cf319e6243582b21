"""tsdn's northbound gRPC API: how data-management services request, watch and release bandwidth."""
