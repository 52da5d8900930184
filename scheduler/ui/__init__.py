"""Tessera's read-only web views: the live dashboard at /ui and self-contained HTML reports."""

from scheduler.ui.build import build_view
from scheduler.ui.page import render_dashboard
from scheduler.ui.view import DashboardView

__all__ = ["DashboardView", "build_view", "render_dashboard"]
