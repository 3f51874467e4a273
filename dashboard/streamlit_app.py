"""Seer dashboard: ``streamlit run dashboard/streamlit_app.py -- [--database-url URL]
[--service-url URL] [--refresh-s S]`` (see docs/dashboard.md).

Not named ``app.py``: Streamlit puts this folder first on ``sys.path``, where a module named
``app`` would hide the service's ``app`` package."""

from __future__ import annotations

import streamlit as st

from dashboard import ui
from dashboard.screens import history, now, speculation, tuning


def main() -> None:
    st.set_page_config(page_title="Seer", layout="wide")
    cfg = ui.config()
    ui.sidebar(cfg)
    now_page = st.Page(now.render, title="Now", url_path="now")
    pages = [
        # Streamlit serves its default page at "/" only: /now (the URL of Now everywhere else)
        # was "Page not found". The root is a hidden page that opens Now at its own URL.
        st.Page(lambda: st.switch_page(now_page), title="Seer", url_path="home", default=True,
                visibility="hidden"),
        now_page,
        st.Page(speculation.render, title="Speculation", url_path="speculation"),
        st.Page(history.render, title="History", url_path="history"),
        st.Page(tuning.render, title="Tuning", url_path="tuning"),
    ]  # fmt: skip
    st.navigation(pages).run()


main()
