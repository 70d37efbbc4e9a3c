#include "core/protocol/multipart_field.h"

#include <gtest/gtest.h>

#include <string>

namespace warden {
namespace {

const std::string kBody =
    "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
    "Content-Type: audio/wav\r\n\r\nRIFF\r\n-- XyZ\r\n\r\n"
    "--XyZ\r\ncontent-disposition: form-data; name=model\r\n\r\nwhisper-large\r\n"
    "--XyZ\r\nContent-Disposition: form-data; name=\"language\"\r\n\r\nen\r\n--XyZ--\r\n";

TEST(MultipartField, FindsAFieldAfterAFile) {
  const auto model = MultipartField("multipart/form-data; boundary=XyZ", kBody, "model");
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->value, "whisper-large");
  EXPECT_EQ(kBody.substr(model->offset, model->value.size()), "whisper-large");
  const auto language =
      MultipartField("Multipart/Form-Data;charset=utf-8; boundary=\"XyZ\"", kBody, "language");
  ASSERT_TRUE(language.has_value());
  EXPECT_EQ(language->value, "en");
}

// Two fields of the name: the last, as vLLM's server takes it; a parameter after trailing spaces.
TEST(MultipartField, TheLastOfTwoFieldsIsTaken) {
  const std::string twice =
      "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nw\r\n"
      "--b\r\nContent-Disposition: form-data;  name=\"model\"  \r\n\r\nchat-m\r\n--b--\r\n";
  const auto model =
      MultipartField("multipart/form-data;  charset=x  ; boundary=b  ", twice, "model");
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->value, "chat-m");
}

TEST(MultipartField, ANameMustBePlainText) {
  EXPECT_TRUE(IsPlainText("whisper-large-v3"));
  EXPECT_TRUE(IsPlainText("modèle"));
  EXPECT_FALSE(IsPlainText("\xff\xfe\"x"));
  EXPECT_FALSE(IsPlainText("a\tb"));
}

TEST(MultipartField, NothingWithoutTheTypeTheBoundaryOrAWholeField) {
  EXPECT_FALSE(MultipartField("application/json", kBody, "model"));
  EXPECT_FALSE(MultipartField("multipart/form-data", kBody, "model"));
  EXPECT_FALSE(MultipartField("multipart/form-data; boundary=other", kBody, "model"));
  EXPECT_FALSE(MultipartField("multipart/form-data; boundary=XyZ", kBody, "prompt"));
  const std::string cut = kBody.substr(0, kBody.find("whisper") + 4);
  EXPECT_FALSE(MultipartField("multipart/form-data; boundary=XyZ", cut, "model"));
  EXPECT_FALSE(MultipartField("multipart/form-data; boundary=XyZ", "", "model"));
}

// A boundary is 1 to 70 characters (RFC 2046): a longer one names no field (a 60 KB boundary of
// dashes over a 32 MiB body of dashes held the gateway's thread for seconds: found by review).
TEST(MultipartField, ABoundaryLongerThanSeventyCharactersNamesNoField) {
  const auto with = [](const std::string& boundary) {
    return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--" +
           boundary + "--\r\n";
  };
  const std::string seventy(70, '-');
  const auto found =
      MultipartField("multipart/form-data; boundary=\"" + seventy + "\"", with(seventy), "model");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->value, "m");
  const std::string longer(71, '-');
  EXPECT_FALSE(
      MultipartField("multipart/form-data; boundary=\"" + longer + "\"", with(longer), "model"));
}

}  // namespace
}  // namespace warden
