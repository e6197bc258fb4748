package console_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// loginResponse posts token to the console's login at base.
func loginResponse(t *testing.T, base, token string, header http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// sessionCookie logs in with token and returns the session cookie.
func sessionCookie(t *testing.T, base, token string) *http.Cookie {
	t.Helper()
	resp := loginResponse(t, base, token, nil)
	for _, c := range resp.Cookies() {
		if c.Name == "orderly_console" {
			return c
		}
	}
	t.Fatalf("login with a valid token answered %d without a session cookie", resp.StatusCode)
	return nil
}

func get(t *testing.T, u string, c *http.Cookie, header http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if c != nil {
		req.AddCookie(c)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf returns the CSRF token the overview renders for session c.
func csrfOf(t *testing.T, base string, c *http.Cookie) string {
	t.Helper()
	_, body := get(t, base, c, nil)
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the overview: %s", body)
	}
	return m[1]
}

func post(t *testing.T, u string, c *http.Cookie, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c != nil {
		req.AddCookie(c)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
