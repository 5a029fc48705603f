package panel

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
)

// The templates and the panel's own CSS and JavaScript are in the
// repository; static/vendor holds htmx and uPlot, copied from npm by `make
// build` (mk/panel.mk) and ignored by git.
//
//go:embed templates static
var embedded embed.FS

// vendorFiles are the npm files the pages load.
var vendorFiles = []string{"vendor/htmx.min.js", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css"}

// staticFiles returns the static tree and whether the npm front end was
// built into it.
func staticFiles() (fs.FS, bool, error) {
	st, err := fs.Sub(embedded, "static")
	if err != nil {
		return nil, false, err
	}
	for _, f := range vendorFiles {
		if _, err := fs.Stat(st, f); err != nil {
			return st, false, nil
		}
	}
	return st, true, nil
}

// staticHandler serves /panel/static/ with long caching: page URLs carry
// each file's content hash (asset), so a new build is fetched anew.
func (s *Server) staticHandler() http.Handler {
	files := http.StripPrefix("/panel/static/", http.FileServerFS(s.static))
	return securityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400")
		files.ServeHTTP(w, r)
	}))
}

// FaviconPath is where browsers look for a site's icon when a page names
// none (and where some always look): the relay mounts it beside Prefix.
const FaviconPath = "/favicon.ico"

// faviconHandler answers FaviconPath with the panel's icon, signed in or
// not, cached for a day like the other static files (pages name the SVG
// with its content hash).
func (s *Server) faviconHandler() http.Handler {
	return securityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := fs.ReadFile(s.static, "favicon.ico")
		if err != nil {
			http.Error(w, "panel: no icon", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "image/x-icon")
		w.Header().Set("Cache-Control", "public, max-age=86400")
		http.ServeContent(w, r, "favicon.ico", time.Time{}, bytes.NewReader(b))
	}))
}

// pages holds one template set per page, each the layout plus the page.
type pages struct {
	sets map[string]*template.Template
}

func parsePages(static fs.FS, now cloud.Now) (*pages, error) {
	versions := map[string]string{}
	err := fs.WalkDir(static, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		versions[p] = hex.EncodeToString(sum[:6])
		return nil
	})
	if err != nil {
		return nil, err
	}
	funcs := template.FuncMap{
		"asset":     func(name string) string { return "/panel/static/" + name + "?v=" + versions[name] },
		"can":       func(u *cloud.User, p string) bool { return u != nil && u.Role.Can(cloud.Permission(p)) },
		"when":      when,
		"iso":       iso,
		"message":   message,
		"readable":  readable,
		"ago":       func(t time.Time) string { return ago(now(), t) },
		"join":      strings.Join,
		"hasPrefix": strings.HasPrefix,
		"lower":     strings.ToLower,
		"secret": func(id, label, value string) secretField {
			return secretField{ID: id, Label: label, Value: value}
		},
		"field": newTextField,
		"scopeFields": func(prefix, kind, ids, tags string, errs map[string]string) scopeFields {
			return scopeFields{Prefix: prefix, Kind: kind, DeviceIDs: ids, Tags: tags, Errors: errs}
		},
		"has":      slices.Contains[[]string],
		"sayState": sayState,
		"sayWaves": sayWaves,
		"inc":      func(i int) int { return i + 1 },
	}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(embedded, "templates/layout.html", "templates/parts.html", "templates/channelform.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(embedded, "templates/page_*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{sets: map[string]*template.Template{}}
	for _, n := range names {
		t, err := template.Must(base.Clone()).ParseFS(embedded, n)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(path.Base(n), "page_"), ".html")
		p.sets[name] = t
	}
	return p, nil
}

// view is what the layout gets: the page's data under Data.
type view struct {
	Title string
	User  *cloud.User
	Flash string
	Built bool // the npm front end is embedded
	Path  string
	Data  any
	SSO   bool // single sign-on is served (Settings → Single sign-on)
	// Live is the page's live updates subscription (<body data-live>,
	// live.go); nil: the page opens no stream.
	Live *liveSub
}

// brand is the product's name, last in every page's title.
const brand = "Fleet"

// DocTitle is the page's <title>: "<Page> · Fleet", or the brand alone
// where the page is named after it (the fleet page), never "Fleet · Fleet".
func (v view) DocTitle() string {
	if v.Title == "" || v.Title == brand {
		return brand
	}
	return v.Title + " · " + brand
}

// textField is a labelled text input with its error and hint (template
// "text", made by the template function "field": id, name, label, value,
// error and, optionally, hint and input type).
type textField struct{ ID, Name, Label, Value, Err, Hint, Type string }

func newTextField(id, name, label, value, err string, more ...string) textField {
	f := textField{ID: id, Name: name, Label: label, Value: value, Err: err, Type: "text"}
	if len(more) > 0 {
		f.Hint = more[0]
	}
	if len(more) > 1 {
		f.Type = more[1]
	}
	return f
}

// scopeFields are the scope fields of a rule's or a silence's form
// (template "scopefields"): Kind "all", "devices" or "tags".
type scopeFields struct {
	Prefix, Kind, DeviceIDs, Tags string
	Errors                        map[string]string
}

// secretField is a secret shown once with its copy button (template
// "secret", made by the template function of the same name).
type secretField struct{ ID, Label, Value string }

// render writes page name in the layout with status.
func (s *Server) render(w http.ResponseWriter, r *http.Request, rq *request, status int, name, title string, data any) {
	v := view{Title: title, Built: s.built, Path: r.URL.Path, Data: data, SSO: s.cfg.OIDC != nil}
	if rq != nil {
		v.User = &rq.User
		v.Flash = s.sessions.PopString(r.Context(), sessFlash)
		v.Live = s.liveSubscription(name, data)
	}
	s.write(w, status, s.pages.sets[name], "layout.html", v)
}

// show renders page name (200) with data, or the failure err when there is
// one.
func (s *Server) show(w http.ResponseWriter, r *http.Request, rq *request, name, title string, data any, err error) {
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.render(w, r, rq, http.StatusOK, name, title, data)
}

// renderPart writes one named template of page name without the layout
// (htmx fragments).
func (s *Server) renderPart(w http.ResponseWriter, page, part string, data any) {
	s.write(w, http.StatusOK, s.pages.sets[page], part, data)
}

func (s *Server) write(w http.ResponseWriter, status int, t *template.Template, name string, v any) {
	var buf bytes.Buffer
	if t == nil {
		http.Error(w, "panel: missing page template", http.StatusInternalServerError)
		return
	}
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		s.log.Error("panel template failed", "template", name, "err", err)
		http.Error(w, "The page could not be rendered; it has been logged.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorData struct {
	Status  int
	Heading string
	Message string
}

// renderError writes the error page with status and message.
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, rq *request, status int, msg string) {
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		fmt.Fprintln(w, msg)
		return
	}
	s.render(w, r, rq, status, "error", http.StatusText(status), errorData{Status: status, Heading: http.StatusText(status), Message: msg})
}

// timeLayout is how every page shows a time: UTC to the second
// ("2026-11-27 07:40:12 UTC"); a <time> element carries it in ISO form.
const timeLayout = "2006-01-02 15:04:05 UTC"

// isoLayout is the datetime attribute of a <time> element.
const isoLayout = "2006-01-02T15:04:05.000Z07:00"

// when formats t for a page (timeLayout), "—" for zero.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(timeLayout)
}

// iso is t in a <time> element's datetime attribute.
func iso(t time.Time) string { return t.UTC().Format(isoLayout) }

// ago says how long before now t was: seconds under a minute (a device
// that went OFFLINE 40 s ago was not seen "just now"), then minutes, hours
// (under two days) and days, each rounded down.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days ago", int(d/(24*time.Hour)))
}

// isoInText finds the RFC 3339 UTC times the relay writes into alert and
// event messages (resource.FormatTime).
var isoInText = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z\b`)

// readable is msg with each ISO time in it as the pages show times
// (timeLayout): for titles and labels. The API keeps the message as stored.
func readable(msg string) string {
	return isoInText.ReplaceAllStringFunc(msg, func(m string) string {
		if t, err := time.Parse(time.RFC3339Nano, m); err == nil {
			return when(t)
		}
		return m
	})
}

// message is msg as HTML text with each ISO time in it a <time> element
// shown as the pages show times: the rest of msg escaped as text.
func message(msg string) template.HTML {
	var b strings.Builder
	last := 0
	for _, m := range isoInText.FindAllStringIndex(msg, -1) {
		t, err := time.Parse(time.RFC3339Nano, msg[m[0]:m[1]])
		if err != nil {
			continue
		}
		b.WriteString(template.HTMLEscapeString(msg[last:m[0]]))
		fmt.Fprintf(&b, `<time datetime="%s">%s</time>`, iso(t), when(t))
		last = m[1]
	}
	b.WriteString(template.HTMLEscapeString(msg[last:]))
	return template.HTML(b.String()) // escaped above
}
