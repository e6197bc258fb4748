package console

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/service"
)

// Prefix is the path under which the console is served (the operator API
// is Prefix + "v1/", routed apart).
const Prefix = "/operator/"

// DefaultSessionTTL is how long a console session lasts.
const DefaultSessionTTL = 8 * time.Hour

// CookieName is the session cookie's name.
const CookieName = "orderly_console"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the console.
type Config struct {
	// Credentials are the operators allowed in (operator.ParseCredentials).
	Credentials []operator.Credential
	// BasePath is the path the console's proxy serves it under ("/ops":
	// pages at /ops/operator/), which wins over X-Forwarded-Prefix; empty
	// takes X-Forwarded-Prefix when the request has a clean one.
	BasePath string
	// SessionTTL is how long a session lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// SessionKey signs sessions and CSRF tokens (default: derived from
	// the credentials' tokens, so instances configured alike agree).
	SessionKey []byte
	// AuthFailuresPerMinute is how many failed logins one client address
	// may make per minute (default operator.DefaultAuthFailuresPerMinute).
	AuthFailuresPerMinute int
	// Logger receives internal errors (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of sessions and the limiter (default time.Now).
	Now func() time.Time
}

type handler struct {
	ops   *service.Operations
	cfg   Config
	log   *slog.Logger
	auth  *operator.Authenticator
	key   []byte
	pages map[string]*template.Template

	mu      sync.Mutex
	revoked map[string]time.Time // logged-out nonces, until their expiry
}

// CleanBasePath reports whether p is a usable base path: empty, or "/"
// followed by segments of [A-Za-z0-9._~-] separated by single slashes,
// without "." or ".." segments and without a trailing slash.
func CleanBasePath(p string) bool {
	if p == "" {
		return true
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || len(p) > 200 {
		return false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, c := range seg {
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune("._~-", c) {
				return false
			}
		}
	}
	return true
}

// New returns the console over ops, routed under Prefix. It panics on a
// BasePath that is not clean (CleanBasePath): orderd checks it first.
func New(ops *service.Operations, cfg Config) http.Handler {
	if !CleanBasePath(cfg.BasePath) {
		panic(fmt.Sprintf("console: base path %q is not clean", cfg.BasePath))
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &handler{ops: ops, cfg: cfg, log: cfg.Logger, revoked: map[string]time.Time{},
		auth: operator.NewAuthenticator(cfg.Credentials, cfg.AuthFailuresPerMinute, cfg.Now)}
	h.key = cfg.SessionKey
	if len(h.key) == 0 {
		h.key = deriveKey(cfg.Credentials)
	}
	h.pages = parsePages()
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.Use(h.secure)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { h.notFound(w, r) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) { h.notFound(w, r) })
	r.Route(strings.TrimSuffix(Prefix, "/"), func(r chi.Router) {
		r.Handle("/static/*", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
		r.Get("/login", h.loginPage)
		r.Post("/login", h.login)
		r.Group(func(r chi.Router) {
			r.Use(h.session)
			r.Post("/logout", h.logout)
			r.Get("/", h.overview)
			r.Get("/orders", h.orders)
			r.Get("/orders/{id}", h.orderPage)
			r.Get("/attempts", h.attempts)
			r.Get("/endpoints", h.endpoints)
			r.Get("/endpoints/{id}", h.endpointPage)
			r.Get("/deliveries", h.deliveries)
			r.Get("/audit", h.audit)
			r.Post("/actions/{action}", h.act)
		})
	})
	return r
}

// deriveKey is HMAC-SHA256 over the credentials' tokens, sorted.
func deriveKey(creds []operator.Credential) []byte {
	var toks []string
	for _, c := range creds {
		toks = append(toks, c.Token)
	}
	sort.Strings(toks)
	m := hmac.New(sha256.New, []byte("orderly-console-session-v1"))
	for _, t := range toks {
		m.Write([]byte(t))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// csp is the Content-Security-Policy of every answer: nothing inline,
// nothing from elsewhere, never framed.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// secure sets the security headers of every answer and refuses a
// cross-site POST (Sec-Fetch-Site, Fetch Metadata) before anything else.
func (h *handler) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, Prefix+"static/") {
			hd.Set("Cache-Control", "no-store")
		}
		if r.Method == http.MethodPost && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			h.problem(w, r, nil, http.StatusForbidden, "Cross-site request refused",
				"a form of another site was posted to the console; nothing was done")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// base returns the base path of r's links (see Config.BasePath).
func (h *handler) base(r *http.Request) string {
	if h.cfg.BasePath != "" {
		return h.cfg.BasePath
	}
	if p := strings.TrimSuffix(r.Header.Get("X-Forwarded-Prefix"), "/"); p != "" && CleanBasePath(p) {
		return p
	}
	return ""
}

// overTLS reports whether the browser reached us over TLS (directly or
// through a proxy that says so).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(strings.TrimSpace(strings.Split(r.Header.Get("X-Forwarded-Proto"), ",")[0]), "https")
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// session is the signed content of the cookie.
type session struct {
	Name   string `json:"n"`
	Hash   string `json:"h"` // hex SHA-256 of the token
	Expiry int64  `json:"e"` // Unix seconds
	Nonce  string `json:"s"`
}

func (h *handler) sign(b []byte) []byte {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte("session\x00"))
	m.Write(b)
	return m.Sum(nil)
}

func (h *handler) encode(s session) string {
	b, _ := json.Marshal(s)
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(h.sign(b))
}

func (h *handler) decode(v string) (session, bool) {
	p, sig, ok := strings.Cut(v, ".")
	if !ok {
		return session{}, false
	}
	b, err1 := base64.RawURLEncoding.DecodeString(p)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, h.sign(b)) {
		return session{}, false
	}
	var s session
	if err := json.Unmarshal(b, &s); err != nil {
		return session{}, false
	}
	return s, true
}

// csrf is the CSRF token of the session with nonce.
func (h *handler) csrf(nonce string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte("csrf\x00" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// viewer is the operator a request is from, with its session.
type viewer struct {
	operator.Credential
	nonce string
	csrf  string
}

type viewerKey struct{}

func viewerOf(r *http.Request) viewer {
	v, _ := r.Context().Value(viewerKey{}).(viewer)
	return v
}

func (h *handler) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	//nolint:gosec // G124: HttpOnly and SameSite=Strict always; Secure whenever the browser came over TLS (directly or per X-Forwarded-Proto), so a loopback http console still works
	return &http.Cookie{Name: CookieName, Value: value, Path: h.base(r) + Prefix, MaxAge: maxAge, HttpOnly: true,
		Secure: overTLS(r), SameSite: http.SameSiteStrictMode}
}

// session admits a request with a valid, unexpired, unrevoked session of
// a configured credential, and checks the CSRF token of a POST; a GET
// without one is sent to the login page, a POST answered 401 or 403.
func (h *handler) session(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := h.cfg.Now()
		var v viewer
		ok := false
		if c, err := r.Cookie(CookieName); err == nil {
			if s, valid := h.decode(c.Value); valid && now.Unix() < s.Expiry && !h.isRevoked(s.Nonce) {
				var hash [32]byte
				if hb, err := hex.DecodeString(s.Hash); err == nil && len(hb) == 32 {
					copy(hash[:], hb)
					if cr, current := h.auth.Current(s.Name, hash); current {
						v, ok = viewer{Credential: cr, nonce: s.Nonce, csrf: h.csrf(s.Nonce)}, true
					}
				}
			}
		}
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, h.base(r)+Prefix+"login", http.StatusSeeOther) //nolint:gosec // G710: a path of our own: base is the configured ORDERD_OPERATOR_BASE_PATH or an X-Forwarded-Prefix that CleanBasePath accepted (letters, digits, ._~- segments), never a host
				return
			}
			h.problem(w, r, nil, http.StatusUnauthorized, "Not logged in", "your session has ended: log in again")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if err := r.ParseForm(); err != nil {
				h.problem(w, r, &v, http.StatusBadRequest, "Bad form", "the form could not be read")
				return
			}
			got := r.PostForm.Get("csrf")
			if subtle.ConstantTimeCompare([]byte(got), []byte(v.csrf)) != 1 {
				h.problem(w, r, &v, http.StatusForbidden, "CSRF token missing or wrong",
					"this form did not carry the console's CSRF token, so nothing was done: reload the page and submit it again")
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(contextWith(r, v)))
	})
}

func (h *handler) isRevoked(nonce string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.revoked[nonce]
	return ok
}

func (h *handler) revoke(nonce string, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Now()
	for n, t := range h.revoked {
		if now.After(t) {
			delete(h.revoked, n)
		}
	}
	h.revoked[nonce] = until
}

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, nil, http.StatusOK, "login", "Log in", nil)
}

// login exchanges an operator token for a session cookie.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		h.render(w, r, nil, http.StatusBadRequest, "login", "Log in", map[string]string{"Error": "the form could not be read"})
		return
	}
	c, ok, wait := h.auth.Login(clientAddr(r), strings.TrimSpace(r.PostForm.Get("token")))
	switch {
	case wait > 0:
		w.Header().Set("Retry-After", strconv.Itoa(wait))
		h.render(w, r, nil, http.StatusTooManyRequests, "login", "Log in", map[string]string{
			"Error": fmt.Sprintf("too many failed logins from your address: try again in %d seconds", wait)})
		return
	case !ok:
		h.render(w, r, nil, http.StatusUnauthorized, "login", "Log in", map[string]string{
			"Error": "that is not an operator token (tenant API keys are not operator credentials)"})
		return
	}
	sum := sha256.Sum256([]byte(c.Token))
	s := session{Name: c.Name, Hash: hex.EncodeToString(sum[:]), Expiry: h.cfg.Now().Add(h.cfg.SessionTTL).Unix(),
		Nonce: randomToken(18)}
	http.SetCookie(w, h.cookie(r, h.encode(s), int(h.cfg.SessionTTL/time.Second)))
	http.Redirect(w, r, h.base(r)+Prefix, http.StatusSeeOther) //nolint:gosec // G710: a path of our own: base is the configured ORDERD_OPERATOR_BASE_PATH or an X-Forwarded-Prefix that CleanBasePath accepted (letters, digits, ._~- segments), never a host
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	h.revoke(v.nonce, h.cfg.Now().Add(h.cfg.SessionTTL))
	http.SetCookie(w, h.cookie(r, "", -1))
	http.Redirect(w, r, h.base(r)+Prefix+"login", http.StatusSeeOther) //nolint:gosec // G710: a path of our own: base is the configured ORDERD_OPERATOR_BASE_PATH or an X-Forwarded-Prefix that CleanBasePath accepted (letters, digits, ._~- segments), never a host
}

// page is what every template gets.
type page struct {
	Title  string
	Base   string // base path + "/operator"
	Viewer *viewer
	CanAct bool
	CSRF   string
	Tenant string
	Path   string // this page's path within the console, with its query
	Data   any
}

// render writes page name with data, status.
func (h *handler) render(w http.ResponseWriter, r *http.Request, v *viewer, status int, name, title string, data any) {
	p := page{Title: title, Base: h.base(r) + strings.TrimSuffix(Prefix, "/"), Viewer: v, Data: data,
		Tenant: r.URL.Query().Get("tenant"), Path: strings.TrimPrefix(r.URL.RequestURI(), strings.TrimSuffix(Prefix, "/"))}
	if v != nil {
		p.CanAct, p.CSRF = v.Role == operator.RoleOperator, v.csrf
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered; it has been logged", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// problemData is the error page's.
type problemData struct {
	Status int
	Title  string
	Detail string
	Code   string
	Fields []string
	Back   string
}

func (h *handler) problem(w http.ResponseWriter, r *http.Request, v *viewer, status int, title, detail string) {
	h.render(w, r, v, status, "problem", title, problemData{Status: status, Title: title, Detail: detail})
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.problem(w, r, nil, http.StatusNotFound, "Not found", "the console has no page "+r.URL.Path)
}
