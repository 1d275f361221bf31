package image

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// SBOMFileName is the SPDX document `image build` writes next to the
// image.
const SBOMFileName = "sbom.spdx.json"

// The SPDX 2.3 JSON document: only the fields this builder fills.
type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID                string         `json:"SPDXID"`
	Name                  string         `json:"name"`
	VersionInfo           string         `json:"versionInfo,omitempty"`
	Supplier              string         `json:"supplier,omitempty"`
	DownloadLocation      string         `json:"downloadLocation"`
	FilesAnalyzed         bool           `json:"filesAnalyzed"`
	Checksums             []spdxChecksum `json:"checksums,omitempty"`
	SourceInfo            string         `json:"sourceInfo,omitempty"`
	LicenseConcluded      string         `json:"licenseConcluded"`
	LicenseDeclared       string         `json:"licenseDeclared"`
	CopyrightText         string         `json:"copyrightText"`
	PrimaryPackagePurpose string         `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs          []spdxRef      `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// sbomPackage is one package the SBOM lists.
type sbomPackage struct {
	Name, Version, Arch, Source, SHA256, Maintainer string
}

// spdxIDRE is what an SPDX identifier may hold after "SPDXRef-".
var spdxIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9.-]`) })

const noAssertion = "NOASSERTION"

// makeSBOM renders the SPDX 2.3 document of an image (its manifest
// digest, layer digest) and the packages in it. distro is the purl
// namespace (debian, ubuntu) and qualifier (debian-bookworm). Everything
// in it derives from the image and the lock, so it is reproducible too.
func makeSBOM(name, imageDigest, layerDigest string, created time.Time, tool, distro, release string, pkgs []sbomPackage) ([]byte, error) {
	doc := spdxDoc{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              name,
		DocumentNamespace: "urn:aks-flex-node:image:" + imageDigest,
		CreationInfo:      spdxCreation{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: " + tool}},
	}
	imgID := "SPDXRef-Image"
	doc.Packages = append(doc.Packages, spdxPackage{
		SPDXID: imgID, Name: name, VersionInfo: imageDigest, DownloadLocation: noAssertion,
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: strings.TrimPrefix(layerDigest, "sha256:")}},
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       noAssertion,
		CopyrightText:         noAssertion,
		PrimaryPackagePurpose: "CONTAINER",
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: imgID})
	seen := map[string]bool{}
	for _, p := range pkgs {
		id := "SPDXRef-Package-" + spdxIDRE().ReplaceAllString(p.Name, "-")
		for n := 2; seen[id]; n++ {
			id = fmt.Sprintf("SPDXRef-Package-%s-%d", spdxIDRE().ReplaceAllString(p.Name, "-"), n)
		}
		seen[id] = true
		sp := spdxPackage{
			SPDXID: id, Name: p.Name, VersionInfo: p.Version, DownloadLocation: noAssertion,
			LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
			PrimaryPackagePurpose: "OPERATING-SYSTEM",
			ExternalRefs:          []spdxRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: purl(distro, release, p)}},
		}
		if p.Name != "" && p.Source != "" && p.Source != p.Name {
			sp.SourceInfo = "built from source package " + p.Source
		}
		if p.Maintainer != "" {
			sp.Supplier = "Organization: " + p.Maintainer
		}
		if p.SHA256 != "" {
			sp.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: p.SHA256}}
		}
		doc.Packages = append(doc.Packages, sp)
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: imgID, Type: "CONTAINS", Related: id})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// purl is the package URL of a Debian/Ubuntu binary package.
func purl(distro, release string, p sbomPackage) string {
	q := url.Values{}
	if p.Arch != "" {
		q.Set("arch", p.Arch)
	}
	if release != "" {
		q.Set("distro", release)
	}
	if distro == "" {
		distro = "debian"
	}
	s := "pkg:deb/" + distro + "/" + url.PathEscape(p.Name) + "@" + url.PathEscape(p.Version)
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}
