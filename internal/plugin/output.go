package plugin

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// ReportAPIVersion versions the documents that -o json|yaml prints for
// reports that are not Kubernetes objects (reboot status, reboot plan, ip
// explain). Scripts can rely on its fields; a change that removes or
// renames one bumps it.
const ReportAPIVersion = "plugin.kubext.io/v1alpha1"

// Output is the -o/--output flag of a command that prints a report for
// people by default and a document for machines on request.
type Output struct {
	Format string
}

// formats are the accepted values of -o besides the default.
var formats = []string{"json", "yaml"}

// AddFlag binds -o/--output to cmd, with completion of its values.
func (o *Output) AddFlag(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.Format, "output", "o", "", "Output format: json or yaml (default: a report for people).")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
}

// Validate refuses an unknown format before anything is read from the
// cluster.
func (o *Output) Validate() error {
	switch o.Format {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use -o json or -o yaml, or leave -o out for the report", o.Format)
}

// Structured reports whether a document, not the report, is asked for.
func (o *Output) Structured() bool { return o.Format != "" }

// Print writes doc as JSON or YAML. doc should be a Report.
func (o *Output) Print(w io.Writer, doc any) error {
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if o.Format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}

// Report is the header of every document -o json|yaml prints.
type Report struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// NewReport returns the header of a document of kind.
func NewReport(kind string) Report { return Report{APIVersion: ReportAPIVersion, Kind: kind} }
