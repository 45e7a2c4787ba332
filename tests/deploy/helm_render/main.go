// helm_render renders a Helm chart as `helm template` does, for the subset of Helm that
// sluice's chart uses: Go text/template with the sprig functions (Helm's own engine and
// library), plus Helm's include, toYaml and required; .Values (values.yaml, then each
// VALUES file merged over it), .Release.Name/.Namespace and .Chart.Name/.Version/.AppVersion.
// Helm is not in Debian; this is what the tests render the chart with.
//
//	helm_render CHART_DIR RELEASE NAMESPACE [VALUES...]
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"gopkg.in/yaml.v3"
)

func readYAML(path string) map[string]interface{} {
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &out); err != nil {
		fail(fmt.Errorf("%s: %w", path, err))
	}
	return out
}

// merge lays `over` onto `base` key by key, maps recursively (Helm's values coalescing).
func merge(base, over map[string]interface{}) map[string]interface{} {
	for k, v := range over {
		if bm, ok := base[k].(map[string]interface{}); ok {
			if om, ok := v.(map[string]interface{}); ok {
				base[k] = merge(bm, om)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// helmFuncs are the functions Helm adds to sprig's; include needs the template set itself.
func helmFuncs(t **template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			var buf bytes.Buffer
			err := (*t).ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		"toYaml": func(v interface{}) (string, error) {
			var buf bytes.Buffer
			enc := yaml.NewEncoder(&buf)
			enc.SetIndent(2)
			if err := enc.Encode(v); err != nil {
				return "", err
			}
			return strings.TrimSuffix(buf.String(), "\n"), nil
		},
		"required": func(msg string, v interface{}) (interface{}, error) {
			if v == nil || v == "" {
				return nil, fmt.Errorf("%s", msg)
			}
			return v, nil
		},
	}
}

func chartData(chart map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range chart {
		out[strings.ToUpper(k[:1])+k[1:]] = v // name -> .Chart.Name, as Helm exposes it
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "helm_render:", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 4 {
		fail(fmt.Errorf("usage: helm_render CHART_DIR RELEASE NAMESPACE [VALUES...]"))
	}
	dir := os.Args[1]
	chart := readYAML(filepath.Join(dir, "Chart.yaml"))
	values := readYAML(filepath.Join(dir, "values.yaml"))
	for _, f := range os.Args[4:] {
		values = merge(values, readYAML(f))
	}
	data := map[string]interface{}{
		"Values":  values,
		"Release": map[string]interface{}{"Name": os.Args[2], "Namespace": os.Args[3]},
		"Chart":   chartData(chart),
	}
	files, _ := filepath.Glob(filepath.Join(dir, "templates", "*"))
	sort.Strings(files)
	var t *template.Template
	// missingkey=error: a misspelt value is an error here, not an empty string.
	t = template.New(chart["name"].(string)).Option("missingkey=error").
		Funcs(sprig.TxtFuncMap()).Funcs(helmFuncs(&t))
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		if _, err := t.New(filepath.Base(f)).Parse(string(text)); err != nil {
			fail(err)
		}
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasPrefix(name, "_") || !strings.HasSuffix(name, ".yaml") {
			continue // helpers and notes render nothing themselves
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, name, data); err != nil {
			fail(err)
		}
		if strings.TrimSpace(buf.String()) == "" {
			continue
		}
		fmt.Printf("---\n# Source: %s/templates/%s\n%s\n", chart["name"], name,
			strings.TrimSpace(buf.String()))
	}
}
