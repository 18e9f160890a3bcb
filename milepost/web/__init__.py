"""The web UI's built files (`dist/`, made by `npm run build` in ui/, carried by the wheel)."""
