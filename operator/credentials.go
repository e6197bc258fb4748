package operator

import (
	"errors"
	"fmt"
	"strings"
)

// Role is what an operator credential may do.
type Role string

// Roles.
const (
	// RoleReader reads: lookups and lists, across tenants.
	RoleReader Role = "reader"
	// RoleOperator reads and acts: every write of the operator API.
	RoleOperator Role = "operator"
)

// MinTokenLen is the shortest operator token accepted, in bytes.
const MinTokenLen = 16

// Credential is one operator: Name (who, as audit events record it), Role
// and the bearer Token.
type Credential struct {
	Name  string
	Role  Role
	Token string
}

// ParseCredentials parses "role:name:token" entries separated by commas or
// white space (the -operator-keys flag, or a file's lines). Role is reader
// or operator; name is 1–64 of [A-Za-z0-9._@-]; token is at least
// MinTokenLen bytes without white space or commas. Names and tokens are
// unique. An empty spec yields no credential (the operator API then
// answers nothing but 401).
func ParseCredentials(spec string) ([]Credential, error) {
	var out []Credential
	names, tokens := map[string]bool{}, map[string]bool{}
	for _, f := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		parts := strings.SplitN(f, ":", 3)
		if len(parts) != 3 {
			return nil, errors.New("an operator credential is role:name:token")
		}
		c := Credential{Role: Role(parts[0]), Name: parts[1], Token: parts[2]}
		switch {
		case c.Role != RoleReader && c.Role != RoleOperator:
			return nil, fmt.Errorf("operator credential %q: role must be reader or operator", c.Name)
		case !validName(c.Name):
			return nil, fmt.Errorf("operator credential name %q: 1-64 of letters, digits and ._@-", c.Name)
		case len(c.Token) < MinTokenLen:
			return nil, fmt.Errorf("operator credential %q: the token must be at least %d bytes", c.Name, MinTokenLen)
		case names[c.Name]:
			return nil, fmt.Errorf("operator credential %q is given twice", c.Name)
		case tokens[c.Token]:
			return nil, fmt.Errorf("operator credential %q reuses another operator's token", c.Name)
		}
		names[c.Name], tokens[c.Token] = true, true
		out = append(out, c)
	}
	return out, nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune("._@-", c) {
			return false
		}
	}
	return true
}
