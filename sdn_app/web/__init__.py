"""The controller's live traffic map (HTML page, JSON, server-sent events) and Prometheus /metrics."""

from sdn_app.web.live import LiveMap
from sdn_app.web.server import WebServer

__all__ = ["LiveMap", "WebServer"]
