package deb

// Pkg makes a package for resolver tests.
func Pkg(name, version string) *Package {
	return &Package{Name: name, Version: version, Architecture: "amd64"}
}

// SetRelations sets the raw relation fields Relations parses.
func (p *Package) SetRelations(preDepends, depends, conflicts string) {
	p.rawRelations = [3]string{preDepends, depends, conflicts}
	p.parsed = false
}
