package admission

// MaxTenantLen is the longest tenant name, in bytes.
const MaxTenantLen = 64

// ValidTenant reports whether name is an acceptable tenant name: 1 to
// MaxTenantLen ASCII letters, digits, '_' or '-'. Such a name is one NATS
// subject token as it is (no '.', '*', '>', whitespace or control
// characters: the NATS subject grammar), so two tenants never share a
// subject, and no tenant is ProviderTenant.
func ValidTenant(name string) bool {
	if len(name) == 0 || len(name) > MaxTenantLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
