"""The dashboard's static files (index.html, app.js, app.css), served by the HTTP port."""
